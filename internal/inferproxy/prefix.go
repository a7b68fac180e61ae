package inferproxy

import (
	"container/list"
	"encoding/binary"
	"hash/maphash"
	"sync"
	"time"

	"github.com/cosmicac/cosmicac/internal/fabric"
)

// Prefix-cache-aware routing (cosmic.RoutingPrefix).
//
// An engine keeps the prompts it has just processed in its cache
// (llama.cpp's prompt cache per slot, vLLM's prefix caching): a request
// whose prompt starts like one a replica has just served skips most of its
// prefill there, and only there. The proxy cannot see the engines' caches
// as they change, so it remembers where it sent each prompt: a prompt is cut
// into blocks of prefixBlock bytes of its JSON (the messages, prompt or
// input as the client wrote them, after the instructions), each block's
// hash chained to the one before (a block's hash names the whole prefix up
// to it), and the index maps each hash to the replica it went to last. A
// request goes to the replica that holds its deepest block (the longest
// prefix it shares with a prompt routed before), unless that replica has
// more requests in flight than the bound (a quarter over the mean of the
// candidates, plus two: a popular prompt spreads once its replica is
// loaded, as consistent hashing with bounded loads does, but an engine
// that batches takes a few more at little cost); with no prefix
// held by an eligible replica, it goes to the least-outstanding one, and
// either way its blocks are then remembered as that replica's.
//
// Bytes, not tokens: the proxy has no tokenizer of the model, and a shared
// prefix of bytes is a shared prefix of tokens up to the last token
// boundary, which the engine's own prefix match finds. What is not yet read
// is the engines' own word (llama.cpp's /slots, vLLM's KV events): an
// entry outlives its prompt's eviction from a busy engine's cache, and
// costs only a misrouted request. docs/inference.md, "Routing".

// prefixBlock is the size of a prompt block in bytes (about 64 tokens of
// English text, some JSON).
const prefixBlock = 256

// prefixMaxBlocks bounds how much of a prompt is hashed (128 KiB): a
// longer prompt is routed by its start, and one request takes at most
// this many of the index's entries.
const prefixMaxBlocks = 512

// prefixEntries bounds the index (least recently routed out first): about
// 64 MiB of prompts' blocks, in under 8 MiB.
const prefixEntries = 1 << 18

// loadBound and loadSlack bound the requests in flight a replica may
// carry and still be picked for holding a prefix: loadBound times the
// mean over the candidates, plus loadSlack.
const (
	loadBound = 1.25
	loadSlack = 2
)

// prefixIndex remembers which replica each prompt block went to last.
type prefixIndex struct {
	seed maphash.Seed

	mu  sync.Mutex
	m   map[uint64]*list.Element // of *prefixEntry
	lru list.List                // front: most recently routed
	max int
}

type prefixEntry struct {
	hash uint64
	rep  fabric.PublicKey
}

func newPrefixIndex(max int) *prefixIndex {
	return &prefixIndex{seed: maphash.MakeSeed(), m: map[uint64]*list.Element{}, max: max}
}

// chain answers the chained hashes of the prompt of a JSON request of
// model (its full name, @TEAM/NAME[:ADAPTER]; body, its head read by
// parseHead), one per full block; none for a prompt shorter than a block.
func (x *prefixIndex) chain(model string, body []byte, head requestHead) []uint64 {
	var h maphash.Hash
	h.SetSeed(x.seed)
	h.WriteString(model) // a prefix is a model's (a team's): the same prompt to another model is another
	h.WriteByte(0)
	var out []uint64
	var buf [8]byte
	n := 0
	for _, span := range head.prompt {
		part := body[span[0]:span[1]]
		for len(part) > 0 && len(out) < prefixMaxBlocks {
			take := min(prefixBlock-n, len(part))
			h.Write(part[:take])
			part, n = part[take:], n+take
			if n == prefixBlock {
				sum := h.Sum64()
				out = append(out, sum)
				h.Reset()
				binary.LittleEndian.PutUint64(buf[:], sum)
				h.Write(buf[:]) // the next block's hash names the prefix before it
				n = 0
			}
		}
	}
	return out
}

// deepest answers, for each replica that holds one of chain's blocks, the
// depth (1-based) of the deepest block it holds along the chain's unbroken
// run of known blocks.
func (x *prefixIndex) deepest(chain []uint64) map[fabric.PublicKey]int {
	x.mu.Lock()
	defer x.mu.Unlock()
	var held map[fabric.PublicKey]int
	for i, h := range chain {
		e, ok := x.m[h]
		if !ok {
			break
		}
		if held == nil {
			held = map[fabric.PublicKey]int{}
		}
		held[e.Value.(*prefixEntry).rep] = i + 1
	}
	return held
}

// routed remembers chain's blocks as rep's.
func (x *prefixIndex) routed(chain []uint64, rep fabric.PublicKey) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, h := range chain {
		if e, ok := x.m[h]; ok {
			e.Value.(*prefixEntry).rep = rep
			x.lru.MoveToFront(e)
			continue
		}
		if x.lru.Len() >= x.max {
			old := x.lru.Back()
			x.lru.Remove(old)
			delete(x.m, old.Value.(*prefixEntry).hash)
		}
		x.m[h] = x.lru.PushFront(&prefixEntry{hash: h, rep: rep})
	}
}

// Outcomes of a prefix-routed pick (the prefix_routed metric).
const (
	prefixHit       = "hit"        // the replica holding the deepest block
	prefixOverBound = "over_bound" // held, but by replicas over the load bound
	prefixMiss      = "miss"       // held by no candidate
)

// pickPrefix picks a replica of rs not tried for a prompt of chain: the
// eligible one (ready, not kept out, within the load bound) that holds the
// deepest block, else the least-outstanding (pick). It answers the
// replica and how the pick went.
func (x *prefixIndex) pickPrefix(rs []*replica, tried map[*replica]bool, chain []uint64) (*replica, string) {
	held := x.deepest(chain)
	if len(held) == 0 {
		return pick(rs, tried), prefixMiss
	}
	bound := inFlightBound(rs, tried)
	t := time.Now()
	var best *replica
	bestDepth, over := 0, false
	for _, r := range rs {
		d := held[r.key]
		if d == 0 || tried[r] || !r.meta.Load().Ready || r.isDown(t) {
			continue
		}
		if float64(r.outstanding.Load()+1) > bound {
			over = true
			continue
		}
		if d > bestDepth || (d == bestDepth && r.outstanding.Load() < best.outstanding.Load()) {
			best, bestDepth = r, d
		}
	}
	if best != nil {
		return best, prefixHit
	}
	if over {
		return pick(rs, tried), prefixOverBound
	}
	return pick(rs, tried), prefixMiss
}

// inFlightBound is the most requests in flight (this one counted) a
// replica may carry and be picked for its prefix: loadBound times the
// mean over the candidates (this request counted), plus loadSlack.
func inFlightBound(rs []*replica, tried map[*replica]bool) float64 {
	var n, total int64
	t := time.Now()
	for _, r := range rs {
		if tried[r] || !r.meta.Load().Ready || r.isDown(t) {
			continue
		}
		n++
		total += r.outstanding.Load()
	}
	if n == 0 {
		return 0
	}
	return float64(total+1)/float64(n)*loadBound + loadSlack
}
