package fabric

import (
	"context"
	"io"
	"testing"
)

// methodPolicy admits every key and lets each call only the methods listed
// for it, granting the method's name.
type methodPolicy map[PublicKey][]string

func (p methodPolicy) Access(PublicKey) Access { return AccessFull }

func (p methodPolicy) Authorize(k PublicKey, method string) (any, error) {
	for _, m := range p[k] {
		if m == method {
			return "granted " + method, nil
		}
	}
	return nil, Errorf(CodeForbidden, "%s may not call %s", k.Short(), method)
}

// An Authorizer decides each call, event and stream, and its grant reaches
// the handler.
func TestAuthorizerDecidesEachRequest(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			cliID := mustIdentity(t)
			pol := methodPolicy{cliID.PublicKey(): {"allowed", "stream", "event"}}
			srv := newNode(t, "server", withTransports(tr), withPolicy(pol))
			cli := newNode(t, "client", withTransports(tr), withIdentity(cliID), withPolicy(NewAllowList(srv.PublicKey())))
			cli.AddAddrs(srv.PublicKey(), srv.Addr())
			grants := make(chan any, 4)
			for _, m := range []string{"allowed", "refused"} {
				HandleFunc(srv, m, func(ctx context.Context, _ PublicKey, _ struct{}) (string, error) {
					g, _ := GrantFrom(ctx).(string)
					return g, nil
				})
			}
			srv.Handle("event", func(ctx context.Context, _ *Request) (any, error) {
				grants <- GrantFrom(ctx)
				return nil, nil
			})
			for _, m := range []string{"stream", "refusedStream"} {
				srv.HandleStream(m, func(ctx context.Context, r *StreamRequest) error {
					s, err := r.Accept(nil)
					if err != nil {
						return err
					}
					g, _ := GrantFrom(ctx).(string)
					io.WriteString(s, g)
					return nil
				})
			}
			ctx := ctxT(t)

			var got string
			if err := cli.Call(ctx, srv.PublicKey(), "allowed", nil, &got); err != nil || got != "granted allowed" {
				t.Fatalf("allowed: %q, %v", got, err)
			}
			if err := cli.Call(ctx, srv.PublicKey(), "refused", nil, &got); ErrorCode(err) != CodeForbidden {
				t.Fatalf("refused: %v, want forbidden", err)
			}
			if err := cli.Call(ctx, srv.PublicKey(), "missing", nil, &got); ErrorCode(err) != CodeNotFound {
				t.Fatalf("missing: %v, want not_found before authorization", err)
			}
			// An event is at most once; the server may end its stream
			// before the sender sees it written, so only the grant counts.
			cli.Notify(ctx, srv.PublicKey(), "event", nil)
			select {
			case g := <-grants:
				if g != "granted event" {
					t.Fatalf("event grant %v", g)
				}
			case <-ctx.Done():
				t.Fatal("the event never reached its handler")
			}
			s, err := cli.OpenStream(ctx, srv.PublicKey(), "stream", nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(s)
			s.Close()
			if string(b) != "granted stream" {
				t.Fatalf("stream read %q", b)
			}
			if _, err := cli.OpenStream(ctx, srv.PublicKey(), "refusedStream", nil, nil); ErrorCode(err) != CodeForbidden {
				t.Fatalf("refused stream: %v, want forbidden", err)
			}
		})
	}
}
