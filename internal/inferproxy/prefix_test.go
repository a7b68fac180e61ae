package inferproxy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

// chatBody is a chat request with a system prompt and a user's message.
func chatBody(system, user string) []byte {
	return fmt.Appendf(nil, `{"model":"m","stream":true,"messages":[{"role":"system","content":%q},{"role":"user","content":%q}]}`, system, user)
}

var (
	systemA = strings.Repeat("You are a careful assistant of the A team. ", 40) // ~1.7 kB: 6 blocks
	systemB = strings.Repeat("You answer questions about B in one line. ", 40)
)

// chain is x.chain of body, its head read as the proxy does.
func (x *prefixIndex) chainOf(t testing.TB, model string, body []byte) []uint64 {
	head, err := parseHead(body)
	if err != nil {
		t.Fatal(err)
	}
	return x.chain(model, body, head)
}

// TestPromptChain: a prompt's blocks hash as a chain, so two prompts share
// exactly the hashes of the blocks they share from the start; the same
// prompt to another model shares none; a prompt shorter than a block has
// none.
func TestPromptChain(t *testing.T) {
	x := newPrefixIndex(1 << 10)
	a1, a2 := x.chainOf(t, "m", chatBody(systemA, "hello")), x.chainOf(t, "m", chatBody(systemA, "something else entirely"))
	if len(a1) < 6 || len(a2) < 6 {
		t.Fatalf("chains of %d and %d blocks for a 1.7 kB prompt", len(a1), len(a2))
	}
	shared := 0
	for shared < min(len(a1), len(a2)) && a1[shared] == a2[shared] {
		shared++
	}
	// The system message ends inside a block: the blocks before it are shared.
	if want := (len(`[{"role":"system","content":`) + len(fmt.Sprintf("%q", systemA))) / prefixBlock; shared != want {
		t.Errorf("%d blocks shared, want %d (all before the user's message)", shared, want)
	}
	for i := shared; i < min(len(a1), len(a2)); i++ {
		if a1[i] == a2[i] {
			t.Errorf("block %d is shared after the prompts differ", i)
		}
	}
	b := x.chainOf(t, "m", chatBody(systemB, "hello"))
	if b[0] == a1[0] {
		t.Error("two system prompts share their first block's hash")
	}
	if other := x.chainOf(t, "other", chatBody(systemA, "hello")); other[0] == a1[0] {
		t.Error("a prompt to another model shares its hashes")
	}
	if c := x.chainOf(t, "m", chatBody("short", "hi")); len(c) != 0 {
		t.Errorf("a short prompt has %d blocks", len(c))
	}
	// A completion's prompt and the Responses API's instructions count too.
	if c := x.chainOf(t, "m", fmt.Appendf(nil, `{"prompt":%q}`, systemA)); len(c) < 6 {
		t.Errorf("a completion's prompt: %d blocks", len(c))
	}
	if c := x.chainOf(t, "m", fmt.Appendf(nil, `{"instructions":%q,"input":"hi"}`, systemA)); len(c) < 6 {
		t.Errorf("instructions: %d blocks", len(c))
	}
}

// replicasForTest are n ready replicas with distinct keys.
func replicasForTest(n int) []*replica {
	rs := make([]*replica, n)
	for i := range rs {
		r := &replica{}
		r.key[0] = byte(i + 1)
		r.meta.Store(&agentapi.InferenceMeta{Replica: i, Ready: true})
		rs[i] = r
	}
	return rs
}

// TestPickPrefix: a prompt goes to the replica that was sent the longest
// prefix of it, the deepest one winning, unless that replica is over the
// load bound; a prompt with no known prefix goes to the least-outstanding
// replica; replicas not ready, kept out or tried are never picked for
// their prefix.
func TestPickPrefix(t *testing.T) {
	x := newPrefixIndex(1 << 10)
	rs := replicasForTest(3)
	route := func(body []byte, tried map[*replica]bool) (*replica, string) {
		chain := x.chainOf(t, "m", body)
		r, outcome := x.pickPrefix(rs, tried, chain)
		if r != nil {
			x.routed(chain, r.key)
		}
		return r, outcome
	}
	rs[0].outstanding.Store(1)
	rs[2].outstanding.Store(1)
	r, outcome := route(chatBody(systemA, "first"), nil)
	if r != rs[1] || outcome != prefixMiss {
		t.Fatalf("a new prompt: replica %v (%s), want the least outstanding, replica 1 (miss)", r.meta.Load().Replica, outcome)
	}
	rs[1].outstanding.Store(2) // busier than the others, within the bound
	if r, outcome := route(chatBody(systemA, "second user"), nil); r != rs[1] || outcome != prefixHit {
		t.Fatalf("the same system prompt: replica %v (%s), want replica 1 (hit)", r.meta.Load().Replica, outcome)
	}
	// B goes elsewhere (least outstanding), then a prompt sharing more
	// with a later A-prompt finds the deeper one.
	if r, _ := route(chatBody(systemB, "x"), nil); r == rs[1] {
		t.Fatal("a new prompt went to the busiest replica")
	}
	long := chatBody(systemA, strings.Repeat("the same long question ", 30))
	rs[1].outstanding.Store(0)
	rs[0].outstanding.Store(0)
	x.routed(x.chainOf(t, "m", long), rs[0].key) // replica 0 was sent this whole prompt
	if r, outcome := route(chatBody(systemA, strings.Repeat("the same long question ", 30)+" and more"), nil); r != rs[0] || outcome != prefixHit {
		t.Fatalf("the deeper prefix: replica %v (%s), want replica 0", r.meta.Load().Replica, outcome)
	}
	// Over the bound: 1.25 × mean + 2. Replica 0 with 9 in flight, the
	// others none: mean (9+1)/3, bound 6.2.
	rs[0].outstanding.Store(9)
	if r, outcome := route(chatBody(systemA, strings.Repeat("the same long question ", 30)+" again"), nil); r == rs[0] || outcome != prefixOverBound {
		t.Fatalf("over the bound: replica %v (%s), want another (over_bound)", r.meta.Load().Replica, outcome)
	}
	rs[0].outstanding.Store(0)
	// Not ready, kept out, or tried: passed over for the prefix.
	x.routed(x.chainOf(t, "m", long), rs[0].key)
	for name, off := range map[string]func(){
		"not ready": func() { rs[0].meta.Store(&agentapi.InferenceMeta{Replica: 0}) },
		"kept out":  func() { rs[0].markDown(time.Minute) },
	} {
		off()
		if r, _ := route(long, nil); r == rs[0] {
			t.Errorf("%s: picked", name)
		}
		rs[0].meta.Store(&agentapi.InferenceMeta{Replica: 0, Ready: true})
		rs[0].downUntil = time.Time{}
		x.routed(x.chainOf(t, "m", long), rs[0].key)
	}
	if r, _ := route(long, map[*replica]bool{rs[0]: true}); r == rs[0] || r == nil {
		t.Errorf("tried: picked %v", r)
	}
}

// TestPrefixIndexBound: the index holds at most its bound of blocks, the
// least recently routed going first.
func TestPrefixIndexBound(t *testing.T) {
	x := newPrefixIndex(8)
	var k fabric.PublicKey
	a, b := x.chainOf(t, "m", chatBody(systemA, "a")), x.chainOf(t, "m", chatBody(systemB, "b"))
	x.routed(a, k)
	x.routed(b, k)
	if n := x.len(); n != 8 {
		t.Fatalf("%d blocks held, want the bound, 8", n)
	}
	if held := x.deepest(b); held[k] != len(b) {
		t.Errorf("the latest prompt: %d of %d blocks held", held[k], len(b))
	}
	if held := x.deepest(a); held[k] != 0 {
		t.Errorf("the oldest prompt still held to block %d", held[k])
	}
}

// BenchmarkPrefixPick is the prefix policy's work per request on a 5 kB
// prompt: its chain (the head read already, as the proxy reads it for
// every request), the lookup and the pick among 8 replicas, and
// remembering it.
func BenchmarkPrefixPick(b *testing.B) {
	x := newPrefixIndex(prefixEntries)
	rs := replicasForTest(8)
	body := chatBody(strings.Repeat(systemA, 3), "what now?")
	head, err := parseHead(body)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		chain := x.chain("m", body, head)
		r, _ := x.pickPrefix(rs, nil, chain)
		x.routed(chain, r.key)
	}
}

// len answers how many blocks the index holds.
func (x *prefixIndex) len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.lru.Len()
}
