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

// DirectoryLimits bound what a Directory holds, so that no announcer can
// make it grow without bound. Zero fields take the defaults.
type DirectoryLimits struct {
	// TopicsPerKey bounds the topics one key is announced under at once
	// (default 8).
	TopicsPerKey int
	// BytesPerKey bounds the bytes (meta and addresses) of one key's live
	// announcements together (default 16 KiB).
	BytesPerKey int
	// MaxTTL bounds the TTL of an announcement (default MaxAnnounceTTL).
	MaxTTL time.Duration
	// Entries bounds the live announcements of every key together (default
	// 100,000).
	Entries int
}

// Default directory limits.
const (
	DefaultTopicsPerKey = 8
	DefaultBytesPerKey  = 16 << 10
	DefaultDirEntries   = 100_000
)

func (l *DirectoryLimits) setDefaults() {
	if l.TopicsPerKey <= 0 {
		l.TopicsPerKey = DefaultTopicsPerKey
	}
	if l.BytesPerKey <= 0 {
		l.BytesPerKey = DefaultBytesPerKey
	}
	if l.MaxTTL <= 0 || l.MaxTTL > MaxAnnounceTTL {
		l.MaxTTL = MaxAnnounceTTL
	}
	if l.Entries <= 0 {
		l.Entries = DefaultDirEntries
	}
}

// DirectoryConfig configures a Directory.
type DirectoryConfig struct {
	Limits DirectoryLimits
	// MayAnnounce, when set, decides whether the caller of ctx (whose key
	// is key) may announce under topic; an error refuses the announcement
	// (a *Error as it is, anything else as forbidden). Without it every
	// caller the node admits to MethodAnnounce may use any topic.
	MayAnnounce func(ctx context.Context, key PublicKey, topic string) error
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Directory holds announcements in memory and answers lookups. Several may
// run side by side, and peers announce to all. Its state is soft: a
// restarted directory is repopulated by the next round of refreshes (at
// most a third of the TTL). What it holds is bounded per key and in all
// (DirectoryLimits); expired announcements are dropped as they are met and
// in a sweep at most every minute.
type Directory struct {
	cfg DirectoryConfig

	mu        sync.Mutex
	topics    map[string]map[PublicKey]PeerInfo
	byKey     map[PublicKey]*keyUsage
	entries   int
	lastSweep time.Time
}

// keyUsage is what one key holds in a directory.
type keyUsage struct {
	topics map[string]int // topic → the bytes of its announcement
	bytes  int
}

// NewDirectory makes an empty directory with the default limits. now is the
// clock (nil: time.Now).
func NewDirectory(now func() time.Time) *Directory {
	return NewDirectoryWith(DirectoryConfig{Now: now})
}

// NewDirectoryWith makes an empty directory configured by cfg.
func NewDirectoryWith(cfg DirectoryConfig) *Directory {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Limits.setDefaults()
	return &Directory{cfg: cfg, topics: make(map[string]map[PublicKey]PeerInfo), byKey: make(map[PublicKey]*keyUsage), lastSweep: cfg.Now()}
}

// Register serves the directory's methods on r: announce and unannounce need
// full access, lookup only read-only access.
func (d *Directory) Register(r Registrar) {
	HandleFunc(r, MethodAnnounce, func(ctx context.Context, peer PublicKey, p AnnounceParams) (struct{}, error) {
		if err := checkTopic(p.Topic); err != nil {
			return struct{}{}, err
		}
		if f := d.cfg.MayAnnounce; f != nil {
			if err := f(ctx, peer, p.Topic); err != nil {
				if fe := asWireError(err); fe.Code != CodeInternal {
					return struct{}{}, fe
				}
				return struct{}{}, Errorf(CodeForbidden, "%v", err)
			}
		}
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

// Announce records (or refreshes) key under the topic, within the limits.
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
	size := len(p.Meta)
	for _, a := range p.Addrs {
		if _, _, err := ParsePeer(key.String() + "@" + a); err != nil {
			return Errorf(CodeBadRequest, "%v", err)
		}
		size += len(a)
	}
	lim := d.cfg.Limits
	ttl := time.Duration(p.TTLSeconds * float64(time.Second))
	switch {
	case ttl == 0:
		ttl = min(DefaultAnnounceTTL, lim.MaxTTL)
	case ttl < MinAnnounceTTL || ttl > lim.MaxTTL:
		return Errorf(CodeBadRequest, "ttlSeconds must be between %v and %v", MinAnnounceTTL.Seconds(), lim.MaxTTL.Seconds())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.cfg.Now()
	d.sweepLocked(now, false)
	u := d.byKey[key]
	if u != nil {
		for t := range u.topics { // the key's expired announcements free its quota
			if pi, ok := d.topics[t][key]; ok && !now.Before(pi.ExpiresAt) {
				d.dropLocked(t, key)
			}
		}
	}
	old, refresh := 0, false
	if u = d.byKey[key]; u != nil {
		old, refresh = u.topics[p.Topic]
	}
	switch {
	case !refresh && u != nil && len(u.topics) >= lim.TopicsPerKey:
		return Errorf(CodeResourceExhausted, "key %s is announced under %d topics already; the limit is %d", key.Short(), len(u.topics), lim.TopicsPerKey)
	case u != nil && u.bytes-old+size > lim.BytesPerKey:
		return Errorf(CodeResourceExhausted, "key %s would hold %d bytes of announcements; the limit is %d", key.Short(), u.bytes-old+size, lim.BytesPerKey)
	case !refresh && d.entries >= lim.Entries:
		d.sweepLocked(now, true)
		if d.entries >= lim.Entries {
			return Errorf(CodeResourceExhausted, "the directory holds %d announcements; the limit is %d", d.entries, lim.Entries)
		}
	}
	peers := d.topics[p.Topic]
	if peers == nil {
		peers = make(map[PublicKey]PeerInfo)
		d.topics[p.Topic] = peers
	}
	if u == nil {
		u = &keyUsage{topics: map[string]int{}}
		d.byKey[key] = u
	}
	if !refresh {
		d.entries++
	}
	u.topics[p.Topic] = size
	u.bytes += size - old
	peers[key] = PeerInfo{Key: key, Addrs: slices.Clone(p.Addrs), Meta: slices.Clone(p.Meta), ExpiresAt: now.Add(ttl)}
	return nil
}

// dropLocked removes key's announcement under topic.
func (d *Directory) dropLocked(topic string, key PublicKey) {
	peers := d.topics[topic]
	if _, ok := peers[key]; !ok {
		return
	}
	delete(peers, key)
	if len(peers) == 0 {
		delete(d.topics, topic)
	}
	d.entries--
	if u := d.byKey[key]; u != nil {
		u.bytes -= u.topics[topic]
		delete(u.topics, topic)
		if len(u.topics) == 0 {
			delete(d.byKey, key)
		}
	}
}

// Drop removes every announcement of key at once (a key no longer
// admitted: wire it to the revocation of keys).
func (d *Directory) Drop(key PublicKey) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if u := d.byKey[key]; u != nil {
		for t := range u.topics {
			d.dropLocked(t, key)
		}
	}
}

// Unannounce removes key from the topic at once.
func (d *Directory) Unannounce(key PublicKey, topic string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dropLocked(topic, key)
}

// Lookup returns the live peers of a topic, dropping expired ones.
func (d *Directory) Lookup(topic string) []PeerInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.cfg.Now()
	peers := d.topics[topic]
	out := make([]PeerInfo, 0, len(peers))
	for k, p := range peers {
		if !now.Before(p.ExpiresAt) {
			d.dropLocked(topic, k)
			continue
		}
		out = append(out, p)
	}
	sortPeers(out)
	return out
}

// Len is the number of announcements the directory holds (live or expired
// but not dropped yet).
func (d *Directory) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.entries
}

// Sweep drops every expired announcement.
func (d *Directory) Sweep() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sweepLocked(d.cfg.Now(), true)
}

// sweepLocked drops every expired announcement if force is set or the last
// sweep is a minute old.
func (d *Directory) sweepLocked(now time.Time, force bool) {
	if !force && now.Sub(d.lastSweep) < time.Minute {
		return
	}
	d.lastSweep = now
	for t, peers := range d.topics {
		for k, p := range peers {
			if !now.Before(p.ExpiresAt) {
				d.dropLocked(t, k)
			}
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
// ends, then withdraws it. Failures are logged and retried sooner, from half
// a second doubling up to the refresh interval (a directory that has not
// admitted a new key yet admits it a moment later).
func (n *Node) KeepAnnounced(ctx context.Context, p AnnounceParams, dirs ...PublicKey) {
	ttl := time.Duration(p.TTLSeconds * float64(time.Second))
	if ttl == 0 {
		ttl = DefaultAnnounceTTL
	}
	every := ttl / 3
	retry := min(500*time.Millisecond, every)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			for _, d := range dirs {
				n.Call(wctx, d, MethodUnannounce, LookupParams{Topic: p.Topic}, nil)
			}
			cancel()
			return
		case <-t.C:
		}
		next := every
		if err := n.Announce(ctx, p, dirs...); err != nil && ctx.Err() == nil {
			n.log.Warn("announce failed", "topic", p.Topic, "err", err)
			next, retry = retry, min(retry*2, every)
		} else {
			retry = min(500*time.Millisecond, every)
		}
		t.Reset(next)
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
