package k8sworker

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/trust"
	"github.com/cosmicac/cosmicac/internal/vmboot"
)

// The in-VM agents (issue 7, docs/shell.md). At Apply the worker gives each
// VMI an agent identity of its own, kept on the cluster in the VMI's
// cloud-init Secret (the private key only in the user data, the public key
// also in AnnotationAgentKey), so a restarted worker, a restart of the
// replica or a second Apply reuse it. The user data also names the peers
// the agent admits and dials: RackConfig.Peers plus the worker itself.
// The worker binds its agents' keys to their job, replica and VMI in its
// keyring (trust.Keyring; its node's trust policy admits them) while their
// replica exists, and takes their reports (agentapi.MethodReport,
// agentapi.MethodInferenceReport): a replica of a job type in
// RackConfig.RequireAgent is running only once its VMIs are Ready and
// every VMI's agent has reported ready since the VMI was created.

const (
	// AnnotationAgentKey is on each VMI's cloud-init Secret: the public key
	// of the agent the worker issued for that VMI.
	AnnotationAgentKey = "cosmicac.io/agent-key"
	// AnnotationAgentReady is on the replica's carrier: the UIDs of the
	// VMIs whose agents have reported ready (comma-separated). Once set for
	// the current VMIs, the gate stays open: an agent that goes silent
	// later, or a restarted worker that has not heard from it yet, does not
	// take a running replica back to starting.
	AnnotationAgentReady = "cosmicac.io/agent-ready"
)

// NewAgentIdentity is id as the bootstrap carries it.
func NewAgentIdentity(id *fabric.Identity) (AgentIdentity, error) {
	pem, err := id.MarshalPEM()
	if err != nil {
		return AgentIdentity{}, err
	}
	return AgentIdentity{PrivateKeyPEM: string(pem), PublicKey: id.PublicKey().String()}, nil
}

// ParseAgentIdentity parses the key pair a.
func ParseAgentIdentity(a AgentIdentity) (*fabric.Identity, error) {
	return fabric.ParseIdentityPEM([]byte(a.PrivateKeyPEM))
}

// AgentFile returns the content of AgentConfigPath in cloud-init user data
// (vmboot.AgentFile).
func AgentFile(userData []byte) ([]byte, error) { return vmboot.AgentFile(userData) }

// AgentConfigOf reads the agent config back out of cloud-init user data
// (vmboot.AgentConfigOf).
func AgentConfigOf(userData []byte) (AgentConfig, error) { return vmboot.AgentConfigOf(userData) }

// AgentOptions is how the worker serves its VMIs' agents.
type AgentOptions struct {
	// Node is the worker's fabric node: it takes the agents' reports.
	Node *fabric.Node
	// Keys is the keyring of Node's trust policy: the agents' keys are
	// bound there while their replica has objects, then unbound (and their
	// connections revoked).
	Keys *trust.Keyring
	// Addrs are where the agents reach the worker, from the pod network
	// (default: Node.Addr()).
	Addrs []string
	// PollInterval is how often the worker also calls agent.status on each
	// connected agent, to catch a command's exit whose agent.report event
	// was lost (default DefaultAgentPoll). An agent is polled as soon as it
	// is connected after the worker (re)started.
	PollInterval time.Duration
}

// agentSlot is one VMI's agent.
type agentSlot struct {
	replicaKey
	vmi int
}

type agentSeen struct {
	ready bool
	at    time.Time
	// volumes are the job's volumes coming in, as the agent last said
	// (the replica's progress while it starts), and failure why the
	// replica cannot run (a volume not copied in).
	volumes []agentapi.VolumeStatus
	failure *cosmic.Reason
}

// agentHub is the worker's side of its agents.
type agentHub struct {
	opts    AgentOptions
	self    Peer
	started time.Time
	now     func() time.Time // the worker's clock

	mu        sync.Mutex
	slots     map[fabric.PublicKey]agentSlot    // admitted keys
	byReplica map[replicaKey][]fabric.PublicKey // by VMI index
	seen      map[agentSlot]agentSeen           // last report of each agent
	silent    map[agentSlot]bool                // recorded silent
	exits     map[agentSlot]exitSeen            // commands that ended, not acted on yet
	ran       map[replicaKey]bool               // the ork was last told running
	polled    map[fabric.PublicKey]time.Time    // last agent.status answer
	loop      sync.Once
	wake      chan struct{}
}

// ServeAgents makes the worker serve its VMIs' agents on o.Node: it admits
// their keys in o.Keys, takes their reports, tells them its key and
// address (role worker) in their bootstrap, and gates running on their
// readiness for the job types in RackConfig.RequireAgent. Call it before
// Run.
func (w *Worker) ServeAgents(o AgentOptions) error {
	if o.Node == nil || o.Keys == nil {
		return errors.New("k8sworker: ServeAgents needs the worker's fabric node and its keyring")
	}
	o.Keys.OnRevoke(o.Node.Revoke)
	addrs := o.Addrs
	if len(addrs) == 0 && o.Node.Addr() != "" {
		addrs = []string{o.Node.Addr()}
	}
	h := &agentHub{opts: o, started: w.now(), now: w.now,
		self:  Peer{Role: agentapi.RoleWorker, Key: o.Node.PublicKey().String(), Addrs: addrs},
		slots: map[fabric.PublicKey]agentSlot{}, byReplica: map[replicaKey][]fabric.PublicKey{},
		seen: map[agentSlot]agentSeen{}, silent: map[agentSlot]bool{},
		exits: map[agentSlot]exitSeen{}, ran: map[replicaKey]bool{}, polled: map[fabric.PublicKey]time.Time{},
		wake: make(chan struct{}, 1)}
	if h.opts.PollInterval <= 0 {
		h.opts.PollInterval = DefaultAgentPoll
	}
	agentapi.ServeWorkerReports(o.Node, w.onAgentReport)
	w.agents = h
	return nil
}

// onAgentReport takes one report. An agent speaks only for its own VMI:
// a report naming another slot than the one its key was issued for is
// dropped.
func (w *Worker) onAgentReport(peer fabric.PublicKey, r agentapi.WorkerReport) {
	h := w.agents
	h.mu.Lock()
	slot, ok := h.slots[peer]
	if !ok || slot.job != r.JobID || slot.replica != r.Replica || slot.vmi != r.VMIIndex {
		h.mu.Unlock()
		w.log.Warn("agent report for another VMI dropped", "agent", peer.Short(), "job_id", r.JobID, "replica", r.Replica, "vmi_index", r.VMIIndex)
		return
	}
	prev, had := h.seen[slot]
	h.seen[slot] = agentSeen{ready: r.Ready, at: w.now(), volumes: r.Volumes, failure: r.Failure}
	back := h.silent[slot]
	delete(h.silent, slot)
	ended := h.noteCommandLocked(slot, r.Command)
	h.mu.Unlock()
	if back {
		m := w.mem(slot.replicaKey)
		w.record(slot.replicaKey, m, w.now(), "agent", true, "the agent of VMI %s reports again", VMIName(slot.job, slot.replica, slot.vmi))
	}
	if !had || prev.ready != r.Ready || back || (prev.failure == nil) != (r.Failure == nil) || !slices.Equal(prev.volumes, r.Volumes) {
		w.queue.Add(slot.replicaKey)
	}
	if ended {
		h.kick()
	}
}

// peers are the bootstrap's peers: the rack's, then the worker itself.
func (w *Worker) peers() []Peer {
	out := slices.Clone(w.cfg.Peers)
	if w.agents != nil {
		out = append(out, w.agents.self)
	}
	return out
}

// bootstrap is the Bootstrap of replica r of job: the identity of each
// VMI's agent (the one on its Secret when there is one, else a new one)
// and the peers.
func (w *Worker) bootstrap(ctx context.Context, jobID string, r cosmic.Reservation) (Bootstrap, error) {
	b := Bootstrap{Peers: w.peers()}
	for i := range r.Nodes {
		var s corev1.Secret
		err := w.c.Get(ctx, client.ObjectKey{Namespace: w.cfg.Namespace, Name: SecretName(jobID, r.Replica, i)}, &s)
		switch {
		case err == nil:
			if ac, err := AgentConfigOf(s.Data[UserDataKey]); err == nil && ac.Identity != nil {
				if _, err := ParseAgentIdentity(*ac.Identity); err == nil {
					b.Agents = append(b.Agents, *ac.Identity)
					continue
				}
			}
			w.log.Warn("cloud-init Secret holds no usable agent identity: issuing a new one", "secret", s.Name)
		case !apierrors.IsNotFound(err):
			return Bootstrap{}, err
		}
		id, err := fabric.GenerateIdentity()
		if err != nil {
			return Bootstrap{}, err
		}
		ai, err := NewAgentIdentity(id)
		if err != nil {
			return Bootstrap{}, err
		}
		b.Agents = append(b.Agents, ai)
	}
	return b, nil
}

// agentKeys are the public keys on a replica's Secrets, by VMI index.
func agentKeys(o observation) []string {
	var out []string
	for i := range o.secrets {
		s := &o.secrets[i]
		n := vmiIndex(s)
		k := s.Annotations[AnnotationAgentKey]
		if n < 0 || k == "" || s.DeletionTimestamp != nil {
			continue
		}
		for len(out) <= n {
			out = append(out, "")
		}
		out[n] = k
	}
	return out
}

// syncAgents binds the keys of replica k's agents (from its Secrets) and
// unbinds those of a replica that is gone.
func (w *Worker) syncAgents(k replicaKey, typ cosmic.JobType, keys []string, gone bool) {
	h := w.agents
	if h == nil {
		return
	}
	h.loop.Do(func() { go w.agentLoop() })
	var want []fabric.PublicKey
	if !gone {
		for _, s := range keys {
			pk, err := fabric.ParsePublicKey(s)
			if err != nil {
				continue
			}
			want = append(want, pk)
		}
	}
	h.mu.Lock()
	have := h.byReplica[k]
	if slices.Equal(have, want) {
		h.mu.Unlock()
		return
	}
	for _, pk := range have {
		if !slices.Contains(want, pk) {
			delete(h.slots, pk)
			delete(h.polled, pk)
		}
	}
	for i, pk := range want {
		h.slots[pk] = agentSlot{replicaKey: k, vmi: i}
	}
	if len(want) == 0 {
		delete(h.byReplica, k)
		for s := range h.seen {
			if s.replicaKey == k {
				delete(h.seen, s)
				delete(h.silent, s)
			}
		}
		for s := range h.exits {
			if s.replicaKey == k {
				delete(h.exits, s)
			}
		}
		delete(h.ran, k)
	} else {
		h.byReplica[k] = want
	}
	h.mu.Unlock()
	// Unbinding revokes the keys taken off (ServeAgents' OnRevoke).
	h.opts.Keys.BindAgents(orkapi.Placement{Job: k.job, Type: typ, Replica: k.replica, Rack: w.cfg.Rack}, want)
}

// jobTypeOf is the replica's job type from its root (or carrier).
func jobTypeOf(o observation) cosmic.JobType {
	if o.root != nil && o.root.Data["type"] != "" {
		return cosmic.JobType(o.root.Data["type"])
	}
	return ""
}

// reports are the last reports of replica k's agents, by VMI index (nil
// when the worker serves no agents).
func (h *agentHub) reports(k replicaKey) map[int]agentSeen {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var out map[int]agentSeen
	for slot, s := range h.seen {
		if slot.replicaKey == k {
			if out == nil {
				out = map[int]agentSeen{}
			}
			out[slot.vmi] = s
		}
	}
	return out
}

// agentsSilent lists the VMIs of a running replica whose agents have not
// reported for AgentTimeout and were not recorded silent yet (marking
// them), and when to look again.
func (w *Worker) agentsSilent(k replicaKey, vmis []*virtv1.VirtualMachineInstance, now time.Time) ([]string, time.Duration) {
	h := w.agents
	if h == nil {
		return nil, 0
	}
	timeout := w.cfg.AgentTimeout.D()
	var names []string
	var next time.Duration
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, v := range vmis {
		if v == nil {
			continue
		}
		slot := agentSlot{replicaKey: k, vmi: i}
		last := h.started
		if s, ok := h.seen[slot]; ok && s.at.After(last) {
			last = s.at
		}
		if left := timeout - now.Sub(last); left > 0 {
			if next == 0 || left < next {
				next = left + 50*time.Millisecond
			}
			continue
		}
		if !h.silent[slot] {
			h.silent[slot] = true
			names = append(names, v.Name)
		}
	}
	return names, next
}

func joinNames(names []string) string { return strings.Join(names, ", ") }
