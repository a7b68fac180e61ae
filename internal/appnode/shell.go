package appnode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/agent/shellproto"
	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

// Shells reaches the instance agents of gpu-container jobs (docs/shell.md);
// FabricShells is the implementation over the fabric. Without one
// (Deps.Shells), the shell and SSH routes answer 503.
type Shells interface {
	// DialShell opens a shell session on the agent of the job's replica;
	// p.User is the caller the app-node vouches for.
	DialShell(ctx context.Context, job cosmic.Job, replica int, p shellproto.OpenParams) (agentapi.Conn, shellproto.OpenReply, error)
	// DialTCP opens a byte stream to port on the loopback of the replica's
	// VM.
	DialTCP(ctx context.Context, job cosmic.Job, replica int, port int) (agentapi.Conn, error)
}

// DataSyncer is what Shells that reach the agents' data sync implement
// (FabricShells): POST …/datasync answers 501 without it.
type DataSyncer interface {
	// DataSync asks the agent of the job's replica to pull or push
	// volumes now (agentapi.MethodDataSync).
	DataSync(ctx context.Context, job cosmic.Job, replica int, p agentapi.DataSyncParams) (agentapi.DataSyncReply, error)
	// LastDataSync is the agent's last datasync, as it is now (its
	// status's DataSync; nil when it has done none).
	LastDataSync(ctx context.Context, job cosmic.Job, replica int) (*agentapi.DataSyncStatus, error)
}

// written is the body of a handler that answered on its own (an upgraded
// connection): serve writes nothing more.
type written struct{}

// shellTarget checks a shell or SSH request: the caller may use the job
// (its team, or an admin; viewers were refused by the route's access), the
// job is a running gpu-container job, and the replica (?replica=N, default
// 0) exists and runs.
func (s *Server) shellTarget(r *http.Request, c *caller) (cosmic.Job, int, error) {
	return s.agentTarget(r, c, "a shell")
}

// agentTarget is the job and replica (?replica=) whose instance agent a
// request reaches, for what (a shell, a data sync): a visible
// gpu-container job's running replica.
func (s *Server) agentTarget(r *http.Request, c *caller, what string) (cosmic.Job, int, error) {
	replica := 0
	if v := r.URL.Query().Get(apiv1.QueryReplica); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return cosmic.Job{}, 0, badRequest("replica %s: want an index from 0", clip(v))
		}
		replica = n
	}
	j, err := s.visibleJob(r, c)
	if err != nil {
		return j, 0, err
	}
	if j.Spec.Type != cosmic.TypeGPUContainer {
		return j, 0, errorf(http.StatusConflict, apiv1.CodeConflict, "job %s is a %s job; only gpu-container jobs have %s", j.ID, j.Spec.Type, what)
	}
	if j.Status.State != cosmic.StateRunning && j.Status.State != cosmic.StateDegraded {
		return j, 0, errorf(http.StatusConflict, apiv1.CodeConflict, "job %s is %s; %s needs it running", j.ID, j.Status.State, what)
	}
	if replica >= j.Spec.Replicas() {
		return j, 0, badRequest("job %s has no replica %d (it has %d)", j.ID, replica, j.Spec.Replicas())
	}
	if replica < len(j.Status.Replicas) && j.Status.Replicas[replica].State != cosmic.StateRunning {
		return j, 0, errorf(http.StatusConflict, apiv1.CodeConflict, "replica %d of job %s is %s; %s needs it running", replica, j.ID, j.Status.Replicas[replica].State, what)
	}
	if s.shells == nil {
		return j, 0, errorf(http.StatusServiceUnavailable, apiv1.CodeUnavailable, "this app-node does not reach the jobs' agents")
	}
	return j, replica, nil
}

func (s *Server) jobShell(w http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	j, replica, err := s.shellTarget(r, c)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	s.log.Info("shell requested", "job_id", j.ID, "replica", replica, "user", c.user.Name)
	s.auditSession(r, c, AuditShellOpen, fmt.Sprintf("%s/%d", j.ID, replica))
	agentapi.ServeShellRelay(w, r, c.user.Name, func(ctx context.Context, p shellproto.OpenParams) (agentapi.Conn, shellproto.OpenReply, error) {
		return s.shells.DialShell(ctx, j, replica, p)
	})
	s.log.Info("shell ended", "job_id", j.ID, "replica", replica, "user", c.user.Name, "duration_ms", time.Since(start).Milliseconds())
	return written{}, nil
}

func (s *Server) jobSSH(w http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	j, replica, err := s.shellTarget(r, c)
	if err != nil {
		return nil, err
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), apiv1.UpgradeTCP) {
		return nil, badRequest("ssh needs `Upgrade: %s`", apiv1.UpgradeTCP)
	}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	st, err := s.shells.DialTCP(ctx, j, replica, agentapi.DefaultSSHPort)
	cancel()
	if err != nil {
		return nil, agentError(err)
	}
	defer st.Close()
	s.log.Info("ssh connection", "job_id", j.ID, "replica", replica, "user", c.user.Name)
	s.auditSession(r, c, AuditSSHOpen, fmt.Sprintf("%s/%d", j.ID, replica))
	w.Header().Set("Connection", "Upgrade")
	w.Header().Set("Upgrade", apiv1.UpgradeTCP)
	w.WriteHeader(http.StatusSwitchingProtocols)
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return written{}, nil
	}
	defer conn.Close()
	conn.SetDeadline(time.Time{})
	agentapi.Splice(conn, brw.Reader, st)
	return written{}, nil
}

// agentError maps a failure to reach a job's agent to the API's errors.
func agentError(err error) error {
	switch fabric.ErrorCode(err) {
	case fabric.CodeForbidden:
		return errorf(http.StatusForbidden, apiv1.CodeForbidden, "the job's agent refused: %v", err)
	case fabric.CodeBadRequest:
		return badRequest("the job's agent refused: %v", err)
	case agentapi.CodeConflict:
		return errorf(http.StatusConflict, apiv1.CodeConflict, "the job's agent refused: %v", err)
	}
	return errorf(http.StatusServiceUnavailable, apiv1.CodeUnavailable, "reach the job's agent: %v", err)
}

// FabricShells finds a job's agent by a fabric Lookup of agentapi.Topic(job)
// on Directories and opens its streams over Node (the agent dialled Node,
// so the streams ride the agent's own connection).
type FabricShells struct {
	Node        *fabric.Node
	Directories []fabric.PublicKey
	// Verify, if set, says whether key is the agent the platform issued for
	// the job's replica. Announcements by any other key are ignored: a
	// directory takes any admitted key's word for its topic.
	Verify func(jobID string, replica int, key fabric.PublicKey) bool
}

// JobAgentKey reports whether key is one the rack's worker issued for the
// job's replica, as the job's status lists them
// (cosmic.ReplicaStatus.AgentKeys, which the Kubernetes worker reports and
// the ork keeps). A replica whose status lists no key has none.
func JobAgentKey(job cosmic.Job, replica int, key fabric.PublicKey) bool {
	for _, rs := range job.Status.Replicas {
		if rs.Index == replica {
			return slices.Contains(rs.AgentKeys, key.String())
		}
	}
	return false
}

// hasAgentKeys reports whether the job's status lists agent keys for the
// replica.
func hasAgentKeys(job cosmic.Job, replica int) bool {
	for _, rs := range job.Status.Replicas {
		if rs.Index == replica {
			return len(rs.AgentKeys) > 0
		}
	}
	return false
}

// Find returns the key of the agent of the job's replica: among the live
// announcements, one connected to Node first, then the freshest.
func (f FabricShells) Find(ctx context.Context, jobID string, replica int) (fabric.PublicKey, error) {
	return f.find(ctx, jobID, replica, f.Verify)
}

// findFor is Find for a job whose status is known: when the status lists
// the replica's agent keys (a worker that issues them), an announcement
// by any other key is ignored too, Verify or not.
func (f FabricShells) findFor(ctx context.Context, job cosmic.Job, replica int) (fabric.PublicKey, error) {
	verify := f.Verify
	if hasAgentKeys(job, replica) {
		verify = func(jobID string, replica int, key fabric.PublicKey) bool {
			return JobAgentKey(job, replica, key) && (f.Verify == nil || f.Verify(jobID, replica, key))
		}
	}
	return f.find(ctx, job.ID, replica, verify)
}

func (f FabricShells) find(ctx context.Context, jobID string, replica int, verify func(string, int, fabric.PublicKey) bool) (fabric.PublicKey, error) {
	peers, err := f.Node.Lookup(ctx, agentapi.Topic(jobID), f.Directories...)
	if err != nil {
		return fabric.PublicKey{}, fabric.Errorf(fabric.CodeUnavailable, "look up the agent of job %s: %v", jobID, err)
	}
	var best *fabric.PeerInfo
	bestConnected := false
	for i := range peers {
		p := &peers[i]
		var meta struct {
			JobID   string `json:"jobId"`
			Replica int    `json:"replica"`
		}
		if json.Unmarshal(p.Meta, &meta) != nil || meta.JobID != jobID || meta.Replica != replica {
			continue
		}
		if verify != nil && !verify(jobID, replica, p.Key) {
			continue
		}
		connected := f.Node.Connected(p.Key)
		if best == nil || (connected && !bestConnected) || (connected == bestConnected && p.ExpiresAt.After(best.ExpiresAt)) {
			best, bestConnected = p, connected
		}
	}
	if best == nil {
		return fabric.PublicKey{}, fabric.Errorf(fabric.CodeUnavailable, "the agent of job %s replica %d has not announced itself", jobID, replica)
	}
	return best.Key, nil
}

// DialShell implements Shells.
func (f FabricShells) DialShell(ctx context.Context, job cosmic.Job, replica int, p shellproto.OpenParams) (agentapi.Conn, shellproto.OpenReply, error) {
	key, err := f.findFor(ctx, job, replica)
	if err != nil {
		return nil, shellproto.OpenReply{}, err
	}
	return agentapi.FabricDialer{Node: f.Node, Agent: key}.DialShell(ctx, job.ID, p)
}

// DialTCP implements Shells.
func (f FabricShells) DialTCP(ctx context.Context, job cosmic.Job, replica int, port int) (agentapi.Conn, error) {
	key, err := f.findFor(ctx, job, replica)
	if err != nil {
		return nil, err
	}
	return agentapi.DialTCP(ctx, f.Node, key, port)
}

// DataSync implements Shells.
func (f FabricShells) DataSync(ctx context.Context, job cosmic.Job, replica int, p agentapi.DataSyncParams) (agentapi.DataSyncReply, error) {
	key, err := f.findFor(ctx, job, replica)
	if err != nil {
		return agentapi.DataSyncReply{}, err
	}
	var out agentapi.DataSyncReply
	err = f.Node.Call(ctx, key, agentapi.MethodDataSync, p, &out)
	return out, err
}

// LastDataSync implements DataSyncer.
func (f FabricShells) LastDataSync(ctx context.Context, job cosmic.Job, replica int) (*agentapi.DataSyncStatus, error) {
	key, err := f.findFor(ctx, job, replica)
	if err != nil {
		return nil, err
	}
	var st agentapi.Status
	if err := f.Node.Call(ctx, key, agentapi.MethodStatus, struct{}{}, &st); err != nil {
		return nil, err
	}
	return st.DataSync, nil
}
