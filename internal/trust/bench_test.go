package trust

import (
	"context"
	"fmt"
	"testing"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
)

// bigRing is a keyring of a large platform: the five components, 100
// racks, 10,000 placed replicas with one agent each.
func bigRing(b *testing.B) (*Keyring, fabric.PublicKey, fabric.PublicKey) {
	b.Helper()
	ring := NewKeyring()
	var app fabric.PublicKey
	for _, r := range []Role{Ork, AppNode, Monitor, Directory, Proxy} {
		id, _ := fabric.GenerateIdentity()
		ring.Add(r, id.PublicKey())
		if r == Proxy {
			app = id.PublicKey()
		}
	}
	p := orkapi.Peers{Epoch: "e", Version: 1}
	var agent fabric.PublicKey
	for i := range 100 {
		id, _ := fabric.GenerateIdentity()
		p.Racks = append(p.Racks, orkapi.RackPeer{Rack: fmt.Sprint("r", i), WorkerKey: id.PublicKey().String()})
	}
	for i := range 10000 {
		id, _ := fabric.GenerateIdentity()
		agent = id.PublicKey()
		p.Placements = append(p.Placements, orkapi.Placement{Job: fmt.Sprint("job-", i), Type: cosmic.TypeManagedInference, Rack: fmt.Sprint("r", i%100), AgentKeys: []string{agent.String()}})
	}
	ring.Apply(p)
	return ring, app, agent
}

// BenchmarkAuthorize is the policy's cost on every fabric request: the
// proxy's key calling inference.http on an agent, an agent's announce on
// the directory.
func BenchmarkAuthorize(b *testing.B) {
	ring, proxy, agent := bigRing(b)
	for _, c := range []struct {
		name   string
		server Role
		key    fabric.PublicKey
		method string
	}{{"component", InferenceAgent, proxy, "inference.http"}, {"bound agent", Directory, agent, "announce"}} {
		p := NewPolicy(c.server, ring)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := p.Authorize(c.key, c.method); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCall is a fabric round trip (1 KiB echo over QUIC) with an
// allow-list and with the trust policy over a large keyring, in one run.
func BenchmarkCall(b *testing.B) {
	ring, _, _ := bigRing(b)
	cliID, _ := fabric.GenerateIdentity()
	ring.Add(AppNode, cliID.PublicKey())
	params := make([]byte, 1024)
	for i := range params {
		params[i] = 'x'
	}
	payload := []byte(`"` + string(params) + `"`)
	for _, c := range []struct {
		name   string
		policy fabric.Policy
	}{{"allow-list", fabric.NewAllowList(cliID.PublicKey())}, {"trust-policy", NewPolicy(Directory, ring)}} {
		b.Run(c.name, func(b *testing.B) {
			srvID, _ := fabric.GenerateIdentity()
			srv, err := fabric.New(fabric.Config{Component: "srv", Identity: srvID, Listen: "127.0.0.1:0", Policy: c.policy})
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			srv.Handle("lookup", func(_ context.Context, r *fabric.Request) (any, error) { return r.Params, nil })
			cli, err := fabric.New(fabric.Config{Component: "cli", Identity: cliID, Policy: fabric.NewAllowList(srvID.PublicKey())})
			if err != nil {
				b.Fatal(err)
			}
			defer cli.Close()
			cli.AddAddrs(srvID.PublicKey(), srv.Addr())
			ctx := context.Background()
			if _, err := cli.CallRaw(ctx, srvID.PublicKey(), "lookup", payload); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := cli.CallRaw(ctx, srvID.PublicKey(), "lookup", payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
