package fabric

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"
)

// Methods served by a Directory.
const (
	MethodAnnounce   = "announce"
	MethodUnannounce = "unannounce"
	MethodLookup     = "lookup"
)

// Limits on announcements.
const (
	DefaultAnnounceTTL = 30 * time.Second
	MinAnnounceTTL     = time.Second
	MaxAnnounceTTL     = 10 * time.Minute
	maxTopicLen        = 256
	maxMetaLen         = 4096
	maxAnnounceAddrs   = 8
)

// AnnounceParams is what a peer announces. The announcer's key is the key it
// proved in the handshake; a peer cannot announce another key.
type AnnounceParams struct {
	Topic string `json:"topic"`
	// Addrs are host:port addresses where the announcer serves. Empty for a
	// peer that only dials out: it is then reachable only over connections it
	// opened itself.
	Addrs []string `json:"addrs,omitempty"`
	// TTLSeconds is how long the announcement lives unless refreshed.
	TTLSeconds float64 `json:"ttlSeconds,omitempty"`
	// Meta is small, opaque JSON that lookups return (≤ 4 KiB).
	Meta json.RawMessage `json:"meta,omitempty"`
}

// LookupParams asks for the live peers of a topic.
type LookupParams struct {
	Topic string `json:"topic"`
}

// PeerInfo is one live announcement.
type PeerInfo struct {
	Key       PublicKey       `json:"key"`
	Addrs     []string        `json:"addrs,omitempty"`
	Meta      json.RawMessage `json:"meta,omitempty"`
	ExpiresAt time.Time       `json:"expiresAt"`
}

// LookupReply lists a topic's live peers, ordered by key.
type LookupReply struct {
	Peers []PeerInfo `json:"peers"`
}

// Directory holds announcements in memory and answers lookups. The ork hosts
// one by default; several may run side by side, and peers announce to all.
// Its state is soft: a restarted directory is repopulated by the next round
// of refreshes (at most a third of the TTL).
type Directory struct {
	mu     sync.Mutex
	topics map[string]map[PublicKey]PeerInfo
	now    func() time.Time
}

// NewDirectory makes an empty directory. now is the clock (nil: time.Now).
func NewDirectory(now func() time.Time) *Directory {
	if now == nil {
		now = time.Now
	}
	return &Directory{topics: make(map[string]map[PublicKey]PeerInfo), now: now}
}

// Register serves the directory's methods on r: announce and unannounce need
// full access, lookup only read-only access.
func (d *Directory) Register(r Registrar) {
	HandleFunc(r, MethodAnnounce, func(_ context.Context, peer PublicKey, p AnnounceParams) (struct{}, error) {
		return struct{}{}, d.Announce(peer, p)
	})
	HandleFunc(r, MethodUnannounce, func(_ context.Context, peer PublicKey, p LookupParams) (struct{}, error) {
		d.Unannounce(peer, p.Topic)
		return struct{}{}, nil
	})
	HandleFunc(r, MethodLookup, func(_ context.Context, _ PublicKey, p LookupParams) (LookupReply, error) {
		if err := checkTopic(p.Topic); err != nil {
			return LookupReply{}, err
		}
		return LookupReply{Peers: d.Lookup(p.Topic)}, nil
	}, ReadOnly())
}

func checkTopic(t string) error {
	if t == "" || len(t) > maxTopicLen {
		return Errorf(CodeBadRequest, "topic must be 1 to %d bytes", maxTopicLen)
	}
	return nil
}

// Announce records (or refreshes) key under the topic.
func (d *Directory) Announce(key PublicKey, p AnnounceParams) error {
	if err := checkTopic(p.Topic); err != nil {
		return err
	}
	if len(p.Meta) > maxMetaLen {
		return Errorf(CodeBadRequest, "meta is %d bytes; the limit is %d", len(p.Meta), maxMetaLen)
	}
	if len(p.Addrs) > maxAnnounceAddrs {
		return Errorf(CodeBadRequest, "at most %d addresses", maxAnnounceAddrs)
	}
	for _, a := range p.Addrs {
		if _, _, err := ParsePeer(key.String() + "@" + a); err != nil {
			return Errorf(CodeBadRequest, "%v", err)
		}
	}
	ttl := time.Duration(p.TTLSeconds * float64(time.Second))
	switch {
	case ttl == 0:
		ttl = DefaultAnnounceTTL
	case ttl < MinAnnounceTTL || ttl > MaxAnnounceTTL:
		return Errorf(CodeBadRequest, "ttlSeconds must be between %v and %v", MinAnnounceTTL.Seconds(), MaxAnnounceTTL.Seconds())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	peers := d.topics[p.Topic]
	if peers == nil {
		peers = make(map[PublicKey]PeerInfo)
		d.topics[p.Topic] = peers
	}
	peers[key] = PeerInfo{Key: key, Addrs: slices.Clone(p.Addrs), Meta: slices.Clone(p.Meta), ExpiresAt: d.now().Add(ttl)}
	return nil
}

// Unannounce removes key from the topic at once.
func (d *Directory) Unannounce(key PublicKey, topic string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if peers := d.topics[topic]; peers != nil {
		delete(peers, key)
		if len(peers) == 0 {
			delete(d.topics, topic)
		}
	}
}

// Lookup returns the live peers of a topic, dropping expired ones.
func (d *Directory) Lookup(topic string) []PeerInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	peers := d.topics[topic]
	out := make([]PeerInfo, 0, len(peers))
	for k, p := range peers {
		if !now.Before(p.ExpiresAt) {
			delete(peers, k)
			continue
		}
		out = append(out, p)
	}
	if peers != nil && len(peers) == 0 {
		delete(d.topics, topic)
	}
	sortPeers(out)
	return out
}

// Sweep drops every expired announcement; call it now and then to bound
// memory held for topics nobody looks up.
func (d *Directory) Sweep() {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	for t, peers := range d.topics {
		for k, p := range peers {
			if !now.Before(p.ExpiresAt) {
				delete(peers, k)
			}
		}
		if len(peers) == 0 {
			delete(d.topics, t)
		}
	}
}

func sortPeers(ps []PeerInfo) {
	sort.Slice(ps, func(i, j int) bool { return ps[i].Key.String() < ps[j].Key.String() })
}

// ---- client side

// Announce announces this node under p.Topic to every directory, filling
// Addrs with the node's own address when p.Addrs is empty. It succeeds if at
// least one directory took the announcement.
func (n *Node) Announce(ctx context.Context, p AnnounceParams, dirs ...PublicKey) error {
	if len(p.Addrs) == 0 && n.addr != "" {
		p.Addrs = []string{n.addr}
	}
	var (
		mu   sync.Mutex
		errs []error
		ok   bool
		wg   sync.WaitGroup
	)
	for _, d := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := n.Call(ctx, d, MethodAnnounce, p, nil)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("directory %s: %w", d.Short(), err))
			} else {
				ok = true
			}
		}()
	}
	wg.Wait()
	if ok || len(dirs) == 0 && len(errs) == 0 {
		if len(dirs) == 0 {
			return Errorf(CodeBadRequest, "no directory to announce to")
		}
		return nil
	}
	return errors.Join(errs...)
}

// KeepAnnounced announces p and refreshes it every third of its TTL until ctx
// ends, then withdraws it. Failures are logged and retried on the next tick.
func (n *Node) KeepAnnounced(ctx context.Context, p AnnounceParams, dirs ...PublicKey) {
	ttl := time.Duration(p.TTLSeconds * float64(time.Second))
	if ttl == 0 {
		ttl = DefaultAnnounceTTL
	}
	tick := time.NewTicker(ttl / 3)
	defer tick.Stop()
	for {
		if err := n.Announce(ctx, p, dirs...); err != nil && ctx.Err() == nil {
			n.log.Warn("announce failed", "topic", p.Topic, "err", err)
		}
		select {
		case <-ctx.Done():
			wctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			for _, d := range dirs {
				n.Call(wctx, d, MethodUnannounce, LookupParams{Topic: p.Topic}, nil)
			}
			cancel()
			return
		case <-tick.C:
		}
	}
}

// Lookup asks every directory for the live peers of topic and merges the
// answers. It fails only if no directory answered. The addresses found are
// added to the node's address book, so the keys can be called at once.
func (n *Node) Lookup(ctx context.Context, topic string, dirs ...PublicKey) ([]PeerInfo, error) {
	type answer struct {
		r   LookupReply
		err error
	}
	answers := make([]answer, len(dirs))
	var wg sync.WaitGroup
	for i, d := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i].err = n.Call(ctx, d, MethodLookup, LookupParams{Topic: topic}, &answers[i].r)
		}()
	}
	wg.Wait()
	merged := make(map[PublicKey]PeerInfo)
	var errs []error
	answered := false
	for i, a := range answers {
		if a.err != nil {
			errs = append(errs, fmt.Errorf("directory %s: %w", dirs[i].Short(), a.err))
			continue
		}
		answered = true
		for _, p := range a.r.Peers {
			old, seen := merged[p.Key]
			if !seen || p.ExpiresAt.After(old.ExpiresAt) {
				merged[p.Key] = p
			}
		}
	}
	if !answered {
		if len(errs) == 0 {
			return nil, Errorf(CodeBadRequest, "no directory to look up in")
		}
		return nil, errors.Join(errs...)
	}
	out := make([]PeerInfo, 0, len(merged))
	for _, p := range merged {
		n.AddAddrs(p.Key, p.Addrs...)
		out = append(out, p)
	}
	sortPeers(out)
	return out, nil
}
