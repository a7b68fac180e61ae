package monitor_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/monitor"
)

func node(t *testing.T, name string, policy fabric.Policy) *fabric.Node {
	t.Helper()
	id, err := fabric.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	listen := "127.0.0.1:0"
	if policy == nil {
		listen = ""
	}
	n, err := fabric.New(fabric.Config{Component: name, Identity: id, Listen: listen, Policy: policy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// A worker's records reach a viewer over the fabric: every setup step up
// to a failure, in order.
func TestForwarderOverFabricToViewer(t *testing.T) {
	e := start(t, monitor.DefaultConfig(""), false)
	allow := fabric.NewAllowList()
	mon := node(t, "wrk-monitor", allow)
	e.m.Serve(mon)
	wrk := node(t, "wrk-server-sim", nil)
	allow.Allow(wrk.PublicKey())
	wrk.AddAddrs(mon.PublicKey(), mon.Addr())

	fwd := joblog.NewForwarder(wrk, mon.PublicKey(), 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go fwd.Run(ctx)
	steps := []string{"schedule", "import_disk", "boot"}
	for i, s := range steps {
		fwd.Emit(joblog.Record{Time: time.Now(), JobID: jobA, Source: joblog.SourceSystem, Stream: "sim-r1", Step: s, OK: joblog.Bool(i < 2), Line: s})
	}
	if err := fwd.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs, _, err := collect(ctx, e.c, client.LogOptions{Source: joblog.SourceSystem}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[0].Step != "schedule" || recs[2].Step != "boot" || *recs[2].OK {
		t.Fatalf("records %+v", recs)
	}
	// A bad record is refused as such.
	err = wrk.Call(ctx, mon.PublicKey(), joblog.MethodAppend, joblog.AppendParams{Records: []joblog.Record{{JobID: jobA, Source: "nope"}}}, nil)
	if fabric.ErrorCode(err) != fabric.CodeBadRequest {
		t.Fatalf("bad record: %v", err)
	}
}

func TestAPIAuthorizer(t *testing.T) {
	// The app-node's answers: token "good" sees jobA; others are refused.
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Authorization") != "Bearer good" && r.Header.Get("Authorization") != "Bearer other":
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":{"code":"unauthorized","message":"missing or invalid token"}}`))
		case r.Header.Get("Authorization") == "Bearer other" || !strings.HasSuffix(r.URL.Path, "/jobs/"+jobA):
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error":{"code":"not_found","message":"no such job"}}`))
		default:
			w.Write([]byte(`{"id":"` + jobA + `"}`))
		}
	})
	m, err := monitor.New(monitor.DefaultConfig(""), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler(monitor.NewAPIAuthorizer("http://app-node", monitor.HandlerTransport(api))))
	defer srv.Close()
	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"bad token", "bad", http.StatusUnauthorized},
		{"job of another team", "other", http.StatusNotFound},
		{"visible job", "good", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := collect(context.Background(), client.New(srv.URL, tc.token), client.LogOptions{}, 0)
			if got := client.StatusOf(err); (tc.want == http.StatusOK && err != nil) || (tc.want != http.StatusOK && got != tc.want) {
				t.Fatalf("got %v, want %d", err, tc.want)
			}
		})
	}
}
