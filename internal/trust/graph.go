// Package trust is the one declaration of CosmicAC's trust graph: the
// classes of key on the fabric (Role), which fabric methods each component
// serves and which classes may call each (Graph), and from that, which
// peers each component admits in the handshake. A Keyring says what class
// each key is: the platform's components and the operators by their
// configured keys, the racks' workers and the jobs' agents bound to their
// rack or their job, replica and VMI as the ork lists them (Keyring.Follow)
// or as a rack worker issued them. NewPolicy turns the declaration and a
// keyring into a component's fabric policy, deny by default.
//
// `cosmicac up` (internal/platform) and every standalone subcommand
// (internal/cli/components) build their policies here and nowhere else; a new edge of
// the graph is a line in Graph. The handlers of methods that agents and
// workers may call confine them further to their own job or rack
// (Method.Confined says how); CallerOf gives a handler its caller.
//
// Any package but those contracts may import trust; it imports the fabric,
// the domain, internal/backoff and the contract packages whose methods the
// graph names (orkapi, agentapi, worker, keyapi, proxyapi, usageapi,
// dataapi, joblog, simapi).
package trust

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/datasync/dataapi"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/inferproxy/keyapi"
	"github.com/cosmicac/cosmicac/internal/inferproxy/proxyapi"
	"github.com/cosmicac/cosmicac/internal/inferproxy/usageapi"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/simcluster/simapi"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// Role is a class of key: a platform component, an operator, a rack's
// worker, or a job's agent. Each component's role also names it as a
// server in Graph.
type Role string

// The roles.
const (
	// Operator keys may call every method of the components that admit
	// them (`cosmicac rpc`; `cosmicac up` admits the local CLI's key).
	Operator Role = "operator"
	Ork      Role = "wrk-ork"
	AppNode  Role = "app-node"
	Monitor  Role = "wrk-monitor"
	// Directory is the agents' directory (wrk-directory).
	Directory Role = "wrk-directory"
	Proxy     Role = "proxy-inference"
	// Worker is a rack's worker (wrk-server-sim, wrk-server-k8s-nvidia),
	// bound to its rack.
	Worker Role = "rack-worker"
	// InstanceAgent and InferenceAgent are the agents inside a job's VMs,
	// bound to their job, replica and VMI. Their keys live in the user's
	// VM: they are the user's.
	InstanceAgent  Role = "agent-instance"
	InferenceAgent Role = "agent-inference"
)

// Roles lists every role, in the order of the documents.
var Roles = []Role{Operator, Ork, AppNode, Monitor, Directory, Proxy, Worker, InstanceAgent, InferenceAgent}

// IsAgent reports whether r is a job's agent.
func (r Role) IsAgent() bool { return r == InstanceAgent || r == InferenceAgent }

// Bound reports whether keys of r are bound to a rack or a job (and so
// known from the ork or the issuing worker, not from configuration).
func (r Role) Bound() bool { return r == Worker || r.IsAgent() }

// Method kinds.
const (
	Call   = "call"
	Event  = "event"
	Stream = "stream"
)

// Method is one fabric method of a server and who may call it. Its Name is
// the one its contract package declares (orkapi, agentapi, worker, keyapi,
// proxyapi, joblog, simapi, the fabric's own), never retyped here. Operators
// may call every method but those marked NoOperators; no one else may call
// a method not declared.
type Method struct {
	Name    string
	Kind    string
	Callers []Role
	// NoOperators refuses operators too: the method speaks for its
	// callers (a worker's report is the rack's word).
	NoOperators bool
	// Confined says how the handler confines the agents and workers among
	// Callers to their own job or rack (empty: not confined).
	Confined string
	// Doc says what the method does, for the documents.
	Doc string
}

// Server is a component as a fabric server: its role and its methods.
// Every server also answers MethodPing to every key it admits.
type Server struct {
	Role    Role
	Doc     string
	Methods []Method
}

// MethodPing is the fabric's ping (fabric.MethodPing), answered to every
// admitted key.
const MethodPing = "ping"

// The confinements several methods share.
const (
	confinedBootstrap = "workers: only the one the agent's bootstrap names (an agent admits no other)"
	confinedReport    = "agents: only reports for their own job, replica and VMI"
	confinedTopic     = "agents: only under their own job's topic (instance/JOB, inference/JOB), within the per-key caps"
)

// Graph is the declaration: every fabric method of every component and the
// roles that may call it. internal/cosmictest and internal/cli/systest test every
// cell of it against `cosmicac up` and separate processes, and keep it in
// step with the methods the components register and with
// docs/security.md.
var Graph = []Server{
	{Role: Ork, Doc: "jobs, racks, placement; the keys bound to racks and jobs", Methods: []Method{
		{Name: orkapi.MethodCreateJob, Kind: Call, Callers: []Role{AppNode}, Doc: "create a job"},
		{Name: orkapi.MethodGetJob, Kind: Call, Callers: []Role{AppNode}, Doc: "read a job"},
		{Name: orkapi.MethodListJobs, Kind: Call, Callers: []Role{AppNode, Proxy}, Doc: "list jobs (the proxy: its model catalog)"},
		{Name: orkapi.MethodDeleteJob, Kind: Call, Callers: []Role{AppNode}, Doc: "delete a job or a replica"},
		{Name: orkapi.MethodRestartJob, Kind: Call, Callers: []Role{AppNode}, Doc: "restart a job or a replica"},
		{Name: orkapi.MethodKillJob, Kind: Call, Callers: []Role{AppNode}, Doc: "kill a job"},
		{Name: orkapi.MethodLabelJob, Kind: Call, Callers: []Role{AppNode}, Doc: "set a label"},
		{Name: orkapi.MethodSetRequireAuth, Kind: Call, Callers: []Role{AppNode}, Doc: "turn a managed-inference job's \"require authorization\" on or off"},
		{Name: orkapi.MethodUpdateJob, Kind: Call, Callers: []Role{AppNode}, Doc: "update a managed-inference job's spec (a rolling update)"},
		{Name: orkapi.MethodRegisterRack, Kind: Call, Callers: []Role{AppNode}, Doc: "register a rack"},
		{Name: orkapi.MethodListRacks, Kind: Call, Callers: []Role{AppNode}, Doc: "list racks"},
		{Name: orkapi.MethodForgetRacks, Kind: Call, Callers: []Role{AppNode}, Doc: "remove racks"},
		{Name: orkapi.MethodDeleteVolume, Kind: Call, Callers: []Role{AppNode}, Doc: "remove a team's standalone volume"},
		{Name: orkapi.MethodWatchPeers, Kind: Call, Callers: []Role{AppNode, Monitor, Directory, Proxy}, Doc: "the keys bound to racks and jobs, long-polled"},
		{Name: orkapi.MethodWatchJobs, Kind: Call, Callers: []Role{AppNode}, Doc: "the jobs' version, long-polled (the API's watches)"},
		{Name: orkapi.MethodSetQuota, Kind: Call, Callers: []Role{AppNode}, Doc: "set a team's GPU quota"},
		{Name: orkapi.MethodDeleteQuota, Kind: Call, Callers: []Role{AppNode}, Doc: "remove a team's GPU quota"},
		{Name: orkapi.MethodListQuotas, Kind: Call, Callers: []Role{AppNode}, Doc: "list the teams' GPU quotas and their use"},
		{Name: orkapi.MethodReportLoad, Kind: Call, Callers: []Role{Proxy}, NoOperators: true, Confined: "counts only toward autoscaled jobs, within their own minReplicas and maxReplicas", Doc: "a proxy's load of the autoscaled jobs"},
		{Name: worker.MethodReport, Kind: Call, Callers: []Role{Worker}, NoOperators: true, Confined: "workers: only reports of their own rack", Doc: "a worker's report"},
	}},
	{Role: AppNode, Doc: "the HTTP API; shells relayed to instance agents", Methods: []Method{
		{Name: keyapi.ByHash.Name, Kind: Call, Callers: []Role{Proxy}, Doc: "resolve an inference API key"},
		{Name: usageapi.Record.Name, Kind: Call, Callers: []Role{Proxy}, NoOperators: true, Confined: "adds to the usage store only; a batch counts once", Doc: "deliver the inference usage a proxy measured"},
		{Name: dataapi.Presign.Name, Kind: Call, Callers: []Role{InstanceAgent, InferenceAgent}, Confined: "agents: only their own job's volumes, each for its container and prefix and as its permission allows, and its model source, read only", Doc: "sign requests for a volume's or a model's objects (never the datastore's key)"},
	}},
	{Role: Monitor, Doc: "job log records in; live streams and Loki out", Methods: []Method{
		{Name: joblog.Append.Name, Kind: Call, Callers: []Role{Ork, Worker, InstanceAgent, InferenceAgent},
			Confined: "the ork: system records only, marked as the ork's; workers: only records of jobs placed on their rack; agents: only records of their own job (team and replica set from the key's binding, system lines marked as the agent's)",
			Doc:      "append log records"},
	}},
	{Role: Directory, Doc: "where the agents announce themselves", Methods: []Method{
		{Name: fabric.MethodAnnounce, Kind: Call, Callers: []Role{InstanceAgent, InferenceAgent}, Confined: confinedTopic, Doc: "announce under a topic"},
		{Name: fabric.MethodUnannounce, Kind: Call, Callers: []Role{InstanceAgent, InferenceAgent}, Confined: "the caller's own announcements only", Doc: "withdraw an announcement"},
		{Name: fabric.MethodLookup, Kind: Call, Callers: []Role{AppNode, Proxy}, Doc: "the live announcements of a topic"},
	}},
	{Role: Proxy, Doc: "the OpenAI-compatible endpoint", Methods: []Method{
		{Name: proxyapi.Health.Name, Kind: Call, Callers: []Role{AppNode}, Doc: "a job's model health"},
	}},
	{Role: Worker, Doc: "a rack's worker (simulated or Kubernetes)", Methods: []Method{
		{Name: worker.MethodCapacity, Kind: Call, Callers: []Role{Ork}, Doc: "the rack's nodes"},
		{Name: worker.MethodApply, Kind: Call, Callers: []Role{Ork}, Doc: "run a job's replicas"},
		{Name: worker.MethodStop, Kind: Call, Callers: []Role{Ork}, Doc: "stop a replica"},
		{Name: worker.MethodRestart, Kind: Call, Callers: []Role{Ork}, Doc: "restart a replica"},
		{Name: worker.MethodDelete, Kind: Call, Callers: []Role{Ork}, Doc: "delete a job's replicas"},
		{Name: worker.MethodDeleteVolume, Kind: Call, Callers: []Role{Ork}, Doc: "remove a standalone volume the rack keeps"},
		{Name: worker.MethodJobs, Kind: Call, Callers: []Role{Ork}, Doc: "every job the rack runs"},
		{Name: agentapi.MethodReport, Kind: Event, Callers: []Role{InstanceAgent}, Confined: confinedReport, Doc: "an instance agent's status"},
		{Name: agentapi.MethodInferenceReport, Kind: Event, Callers: []Role{InferenceAgent}, Confined: confinedReport, Doc: "an inference agent's status"},
		{Name: simapi.MethodFailImport, Kind: Call, Doc: "simulated rack: fail a disk import (operators only)"},
		{Name: simapi.MethodCrash, Kind: Call, Doc: "simulated rack: crash a VMI (operators only)"},
		{Name: simapi.MethodLoseNode, Kind: Call, Doc: "simulated rack: lose a node (operators only)"},
		{Name: simapi.MethodRestoreNode, Kind: Call, Doc: "simulated rack: restore a node (operators only)"},
		{Name: simapi.MethodUnreachable, Kind: Call, Doc: "simulated rack: stop answering (operators only)"},
		{Name: simapi.MethodHoldAgent, Kind: Call, Doc: "simulated rack: keep a replica's agent from connecting (operators only)"},
	}},
	{Role: InstanceAgent, Doc: "inside a gpu-container VM", Methods: []Method{
		{Name: agentapi.MethodShell, Kind: Stream, Callers: []Role{AppNode}, Doc: "a shell session"},
		{Name: agentapi.MethodTCPConnect, Kind: Stream, Callers: []Role{AppNode}, Doc: "a TCP stream to a port of the VM"},
		{Name: agentapi.MethodStatus, Kind: Call, Callers: []Role{AppNode, Worker}, Confined: confinedBootstrap, Doc: "the agent's status"},
		{Name: agentapi.MethodDataSync, Kind: Call, Callers: []Role{AppNode}, Doc: "pull or push the job's volumes now (POST …/datasync)"},
	}},
	{Role: InferenceAgent, Doc: "inside a managed-inference VM", Methods: []Method{
		{Name: agentapi.MethodInferenceHTTP, Kind: Stream, Callers: []Role{Proxy}, Doc: "an HTTP connection to the model server"},
		{Name: agentapi.MethodInferenceStatus, Kind: Call, Callers: []Role{Worker}, Confined: confinedBootstrap, Doc: "the agent's status"},
		{Name: fabric.MethodPark, Kind: Call, Callers: []Role{Proxy}, Doc: "park direct connections with the caller"},
	}},
}

// ServerOf returns the declaration of role's server.
func ServerOf(r Role) (Server, bool) {
	for _, s := range Graph {
		if s.Role == r {
			return s, true
		}
	}
	return Server{}, false
}

// Calls reports whether caller may call method on server (operators may
// call every method of a server that admits them).
func Calls(server Role, method string, caller Role) bool {
	s, ok := ServerOf(server)
	if !ok || !Admits(server, caller) {
		return false
	}
	if method == MethodPing {
		return true
	}
	for _, m := range s.Methods {
		if m.Name == method {
			return slices.Contains(m.Callers, caller) || caller == Operator && !m.NoOperators
		}
	}
	return caller == Operator
}

// Admits lists the roles server admits in the handshake: the callers of its
// methods, the servers whose methods it calls (a dialler checks the key it
// reached too), and operators, except on the agents (the user's VM admits
// only the platform peers its bootstrap names).
func Admits(server, peer Role) bool {
	return slices.Contains(AdmittedBy(server), peer)
}

// AdmittedBy lists the roles server admits, in Roles' order.
func AdmittedBy(server Role) []Role {
	set := map[Role]bool{}
	if !server.IsAgent() {
		set[Operator] = true
	}
	for _, s := range Graph {
		for _, m := range s.Methods {
			for _, c := range m.Callers {
				if s.Role == server {
					set[c] = true
				}
				if c == server {
					set[s.Role] = true
				}
			}
		}
	}
	var out []Role
	for _, r := range Roles {
		if set[r] {
			out = append(out, r)
		}
	}
	return out
}

// ConfiguredPeers lists the roles server admits by configured key: the
// platform's components (not the bound workers and agents, nor operators).
func ConfiguredPeers(server Role) []Role {
	var out []Role
	for _, r := range AdmittedBy(server) {
		if !r.Bound() && r != Operator {
			out = append(out, r)
		}
	}
	return out
}

// Matrix is the access matrix: for each server and method, a cell per
// caller class. It is what docs/security.md shows.
func Matrix() string {
	var b strings.Builder
	classes := append([]Role{}, Roles...)
	b.WriteString("| server | method | kind |")
	for _, c := range classes {
		fmt.Fprintf(&b, " %s |", c)
	}
	b.WriteString(" confined to |\n|---|---|---|")
	for range classes {
		b.WriteString(":-:|")
	}
	b.WriteString("---|\n")
	for _, s := range Graph {
		rows := append([]Method{{Name: MethodPing, Kind: Call, Callers: AdmittedBy(s.Role)}}, s.Methods...)
		for _, m := range rows {
			fmt.Fprintf(&b, "| %s | `%s` | %s |", s.Role, m.Name, m.Kind)
			for _, c := range classes {
				cell := " "
				if Calls(s.Role, m.Name, c) {
					cell = "✓"
				}
				fmt.Fprintf(&b, " %s |", cell)
			}
			fmt.Fprintf(&b, " %s |\n", m.Confined)
		}
	}
	return b.String()
}

// Admissions is the table of which roles each server admits, and how each
// is known, for docs/security.md.
func Admissions() string {
	var b strings.Builder
	b.WriteString("| server | admits by configured key | admits bound keys |\n|---|---|---|\n")
	servers := make([]Role, 0, len(Graph))
	for _, s := range Graph {
		servers = append(servers, s.Role)
	}
	sort.SliceStable(servers, func(i, j int) bool { return slices.Index(Roles, servers[i]) < slices.Index(Roles, servers[j]) })
	for _, s := range servers {
		var conf, bound []string
		for _, r := range AdmittedBy(s) {
			if r.Bound() {
				bound = append(bound, string(r))
			} else {
				conf = append(conf, string(r))
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", s, strings.Join(conf, ", "), strings.Join(bound, ", "))
	}
	return b.String()
}
