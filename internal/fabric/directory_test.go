package fabric

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/waittest"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// dirNode serves a Directory on a node that admits everyone listed.
func dirNode(t *testing.T, clock *fakeClock, allow *AllowList) *Node {
	n := newNode(t, "directory", withPolicy(allow))
	NewDirectory(clock.now).Register(n)
	return n
}

func TestAnnounceLookupExpiry(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	allow := NewAllowList()
	dir := dirNode(t, clock, allow)
	reader := newNode(t, "proxy")
	a := newNode(t, "agent-a", withPolicy(NewAllowList(reader.PublicKey())))
	b := newNode(t, "agent-b")
	allow.Allow(a.PublicKey(), b.PublicKey())
	allow.AllowReadOnly(reader.PublicKey())
	for _, n := range []*Node{a, b, reader} {
		n.AddAddrs(dir.PublicKey(), dir.Addr())
	}
	ctx := ctxT(t)
	topic := "inference/3f7c"
	if err := a.Announce(ctx, AnnounceParams{Topic: topic, TTLSeconds: 10, Meta: json.RawMessage(`{"replica":0}`)}, dir.PublicKey()); err != nil {
		t.Fatal(err)
	}
	if err := b.Announce(ctx, AnnounceParams{Topic: topic, TTLSeconds: 30}, dir.PublicKey()); err != nil {
		t.Fatal(err)
	}
	// A read-only key may look up but not announce.
	if err := reader.Announce(ctx, AnnounceParams{Topic: topic}, dir.PublicKey()); ErrorCode(err) != CodeForbidden {
		t.Fatalf("read-only announce: err = %v, want forbidden", err)
	}
	peers, err := reader.Lookup(ctx, topic, dir.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	if len(peers) != 2 {
		t.Fatalf("peers = %+v, want a and b", peers)
	}
	for _, p := range peers {
		if p.Key == a.PublicKey() && (string(p.Meta) != `{"replica":0}` || len(p.Addrs) != 1 || p.Addrs[0] != a.Addr()) {
			t.Fatalf("a announced as %+v", p)
		}
	}
	// The lookup filled the reader's address book: it can call a at once.
	if err := reader.Call(ctx, a.PublicKey(), MethodPing, nil, nil); err != nil {
		t.Fatalf("call a found by lookup: %v", err)
	}

	clock.add(11 * time.Second) // a expired, b lives
	peers, err = reader.Lookup(ctx, topic, dir.PublicKey())
	if err != nil || len(peers) != 1 || peers[0].Key != b.PublicKey() {
		t.Fatalf("after a's ttl: %+v, %v; want only b", peers, err)
	}
	// Refreshing keeps b alive past its first ttl.
	clock.add(20 * time.Second)
	if err := b.Announce(ctx, AnnounceParams{Topic: topic, TTLSeconds: 30}, dir.PublicKey()); err != nil {
		t.Fatal(err)
	}
	clock.add(20 * time.Second)
	if peers, _ := reader.Lookup(ctx, topic, dir.PublicKey()); len(peers) != 1 {
		t.Fatalf("refreshed b dropped: %+v", peers)
	}
	if err := b.Call(ctx, dir.PublicKey(), MethodUnannounce, LookupParams{Topic: topic}, nil); err != nil {
		t.Fatal(err)
	}
	if peers, _ := reader.Lookup(ctx, topic, dir.PublicKey()); len(peers) != 0 {
		t.Fatalf("unannounced b still listed: %+v", peers)
	}
}

func TestLookupWithOneDirectoryDown(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	allow := NewAllowList()
	d1, d2 := dirNode(t, clock, allow), dirNode(t, clock, allow)
	a := newNode(t, "agent")
	allow.Allow(a.PublicKey())
	for _, d := range []*Node{d1, d2} {
		a.AddAddrs(d.PublicKey(), d.Addr())
	}
	ctx := ctxT(t)
	if err := a.Announce(ctx, AnnounceParams{Topic: "t"}, d1.PublicKey(), d2.PublicKey()); err != nil {
		t.Fatal(err)
	}
	d1.Close()
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	peers, err := a.Lookup(short, "t", d1.PublicKey(), d2.PublicKey())
	if err != nil || len(peers) != 1 {
		t.Fatalf("with one directory down: %+v, %v", peers, err)
	}
	d2.Close()
	short2, cancel2 := context.WithTimeout(ctx, 5*time.Second)
	defer cancel2()
	if _, err := a.Lookup(short2, "t", d1.PublicKey(), d2.PublicKey()); err == nil {
		t.Fatal("lookup with every directory down succeeded")
	}
}

func TestDirectoryRejectsBadAnnouncements(t *testing.T) {
	d := NewDirectory(nil)
	k := mustIdentity(t).PublicKey()
	for name, p := range map[string]AnnounceParams{
		"empty topic": {},
		"ttl too big": {Topic: "t", TTLSeconds: 3600},
		"ttl too low": {Topic: "t", TTLSeconds: 0.1},
		"bad addr":    {Topic: "t", Addrs: []string{"nohost"}},
		"huge meta":   {Topic: "t", Meta: json.RawMessage(`"` + string(make([]byte, 5000)) + `"`)},
	} {
		if err := d.Announce(k, p); ErrorCode(err) != CodeBadRequest {
			t.Errorf("%s: err = %v, want bad_request", name, err)
		}
	}
}

func TestKeepAnnounced(t *testing.T) {
	allow := NewAllowList()
	dirN := newNode(t, "directory", withPolicy(allow))
	dir := NewDirectory(nil)
	dir.Register(dirN)
	a := newNode(t, "agent")
	allow.Allow(a.PublicKey())
	a.AddAddrs(dirN.PublicKey(), dirN.Addr())
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan struct{})
	go func() { a.KeepAnnounced(ctx, AnnounceParams{Topic: "w", TTLSeconds: 3}, dirN.PublicKey()); close(done) }()
	waittest.Until(t, func() bool { return len(dir.Lookup("w")) > 0 }, "the announcement")
	cancel()
	<-done
	if got := dir.Lookup("w"); len(got) != 0 {
		t.Fatalf("still announced after stop: %+v", got)
	}
}

// A directory holds at most the limits' topics and bytes per key and
// entries in all; expired announcements free their quota, and refreshing
// one counts once.
func TestDirectoryLimits(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	d := NewDirectoryWith(DirectoryConfig{Now: clock.now, Limits: DirectoryLimits{TopicsPerKey: 3, BytesPerKey: 100, Entries: 5, MaxTTL: time.Minute}})
	a, b := mustIdentity(t).PublicKey(), mustIdentity(t).PublicKey()
	for i := range 3 {
		if err := d.Announce(a, AnnounceParams{Topic: fmt.Sprint("t", i), TTLSeconds: 10}); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Announce(a, AnnounceParams{Topic: "t0", TTLSeconds: 10}); err != nil {
		t.Fatalf("refresh at the topic cap: %v", err)
	}
	if err := d.Announce(a, AnnounceParams{Topic: "t3"}); ErrorCode(err) != CodeResourceExhausted {
		t.Fatalf("fourth topic: %v, want resource_exhausted", err)
	}
	if err := d.Announce(a, AnnounceParams{Topic: "t0", TTLSeconds: 120}); ErrorCode(err) != CodeBadRequest {
		t.Fatalf("ttl over the limit's: %v, want bad_request", err)
	}
	meta := json.RawMessage(`"` + strings.Repeat("x", 98) + `"`) // 100 bytes
	if err := d.Announce(b, AnnounceParams{Topic: "m", Meta: meta}); err != nil {
		t.Fatal(err)
	}
	if err := d.Announce(b, AnnounceParams{Topic: "m2", Meta: json.RawMessage(`1`)}); ErrorCode(err) != CodeResourceExhausted {
		t.Fatalf("bytes over the key's limit: %v, want resource_exhausted", err)
	}
	if err := d.Announce(b, AnnounceParams{Topic: "m", Meta: json.RawMessage(`2`)}); err != nil {
		t.Fatalf("a smaller refresh: %v", err)
	}
	if err := d.Announce(b, AnnounceParams{Topic: "m2", Meta: json.RawMessage(`3`)}); err != nil {
		t.Fatalf("within bytes after the refresh: %v", err)
	}
	c := mustIdentity(t).PublicKey()
	if err := d.Announce(c, AnnounceParams{Topic: "c"}); ErrorCode(err) != CodeResourceExhausted || d.Len() != 5 {
		t.Fatalf("sixth entry: %v (len %d), want resource_exhausted at 5", err, d.Len())
	}
	clock.add(11 * time.Second) // a's three expire
	if err := d.Announce(c, AnnounceParams{Topic: "c"}); err != nil {
		t.Fatalf("after expiries: %v", err)
	}
	if err := d.Announce(a, AnnounceParams{Topic: "t3"}); err != nil {
		t.Fatalf("a's quota after its announcements expired: %v", err)
	}
	if d.Len() != 4 {
		t.Fatalf("len %d, want 4 (b's two, c, a's t3)", d.Len())
	}
}

// Drop removes every announcement of a key, and its quota with them.
func TestDirectoryDrop(t *testing.T) {
	d := NewDirectoryWith(DirectoryConfig{Limits: DirectoryLimits{TopicsPerKey: 2}})
	a, b := mustIdentity(t).PublicKey(), mustIdentity(t).PublicKey()
	for _, topic := range []string{"x", "y"} {
		if err := d.Announce(a, AnnounceParams{Topic: topic}); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Announce(b, AnnounceParams{Topic: "x"}); err != nil {
		t.Fatal(err)
	}
	d.Drop(a)
	if got := d.Lookup("x"); len(got) != 1 || got[0].Key != b || len(d.Lookup("y")) != 0 || d.Len() != 1 {
		t.Fatalf("after dropping a: x %v, y %v, len %d", got, d.Lookup("y"), d.Len())
	}
	for _, topic := range []string{"x", "y"} {
		if err := d.Announce(a, AnnounceParams{Topic: topic}); err != nil {
			t.Fatalf("a's quota after the drop: %v", err)
		}
	}
}

// MayAnnounce refuses topics, with the caller's grant in its context.
func TestDirectoryMayAnnounce(t *testing.T) {
	allow := NewAllowList()
	srv := newNode(t, "directory", withPolicy(allow))
	own := "instance/"
	NewDirectoryWith(DirectoryConfig{MayAnnounce: func(_ context.Context, key PublicKey, topic string) error {
		if topic != own+key.Short() {
			return Errorf(CodeForbidden, "not your topic")
		}
		return nil
	}}).Register(srv)
	a := newNode(t, "agent")
	allow.Allow(a.PublicKey())
	a.AddAddrs(srv.PublicKey(), srv.Addr())
	ctx := ctxT(t)
	if err := a.Announce(ctx, AnnounceParams{Topic: own + a.PublicKey().Short()}, srv.PublicKey()); err != nil {
		t.Fatal(err)
	}
	if err := a.Announce(ctx, AnnounceParams{Topic: "instance/other"}, srv.PublicKey()); ErrorCode(err) != CodeForbidden {
		t.Fatalf("another topic: %v, want forbidden", err)
	}
}
