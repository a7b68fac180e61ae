package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/backoff"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/datasync"
	"github.com/cosmicac/cosmicac/internal/datasync/dataapi"
	"github.com/cosmicac/cosmicac/internal/datasync/gitsync"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

// Volume is a volume of the job whose data the agent copies in before the
// command starts (docs/data.md): a datastore source, signed for by the
// app-node (dataapi.Presign) and pulled into Dir.
type Volume struct {
	// Index is the volume's index in the job's spec.volumes.
	Index int
	// MountPath is the spec's; Dir is where the data goes: MountPath in a
	// VM, a directory of the job's on the simulated rack's host.
	MountPath string
	Dir       string
	// Push (RW) sends what the job wrote back when its command ends;
	// Delete (RWD) deletes too the remote objects the job deleted;
	// Target pushes to the volume's volumeTarget, not its source.
	Push, Delete, Target bool
	// Git, when set, is a public Git repository's URL, cloned into Dir
	// (gitsync) rather than pulled from a datastore; never pushed.
	Git string
	// Archive and PushArchive, when set, are the formats of the one
	// object the volume is pulled from and pushed to (dataStore.archive).
	Archive, PushArchive string
	// Standalone, when set, is the name of the job's standalone volume
	// (standalone.go): the disk whose serial is Disk, mounted at Dir
	// (read-only when ReadOnly); on the simulated rack (Disk empty) Dir
	// is the directory the rack keeps it in.
	Standalone, Disk string
	ReadOnly         bool
}

// pull copies volume v in with signer.
func (a *Agent) pull(ctx context.Context, signer datasync.Signer, v Volume, opt datasync.Options) (datasync.Stats, error) {
	opt.Client = a.cfg.DataClient
	if v.Archive != "" {
		return datasync.PullArchive(ctx, signer, v.Dir, v.Archive, opt)
	}
	return datasync.Pull(ctx, signer, v.Dir, opt)
}

// push sends volume v back with signer.
func (a *Agent) push(ctx context.Context, signer datasync.Signer, v Volume, opt datasync.Options) (datasync.Stats, error) {
	opt.Client = a.cfg.DataClient
	if v.PushArchive != "" {
		return datasync.PushArchive(ctx, signer, v.Dir, v.PushArchive, opt)
	}
	return datasync.Push(ctx, signer, v.Dir, v.Delete, opt)
}

// pullDeadline bounds how long the agent retries a volume's signing when
// the app-node cannot be reached (it may still be connecting).
const pullDeadline = 2 * time.Minute

// pullVolumes copies every volume of the config in, one after the other,
// reporting each in the status and the job's system records. It answers
// the reason the replica cannot run, or nil when every volume is in.
func (a *Agent) pullVolumes(ctx context.Context, n *fabric.Node) *cosmic.Reason {
	var appNode fabric.PublicKey
	found := false
	for _, p := range a.cfg.Peers {
		if p.Role == agentapi.RoleAppNode {
			appNode, found = p.Key, true
		}
	}
	for i, v := range a.cfg.Volumes {
		a.setVolume(i, func(s *agentapi.VolumeStatus) { s.Phase = agentapi.VolumePulling })
		if v.Standalone != "" {
			if r := a.mountStandalone(ctx, i, v); r != nil {
				return r
			}
			continue
		}
		if v.Git != "" {
			if r := a.cloneVolume(ctx, i, v); r != nil {
				return r
			}
			continue
		}
		if !found {
			r := cosmic.NewReason(cosmic.ReasonVolumeSyncFailed, "the agent knows no app-node to sign its volumes")
			a.failVolume(i, v, r, errors.New(r.Message))
			return &r
		}
		if v.Push && nonEmpty(v.Dir) {
			// The replica's disk was kept (a restart) with what the job
			// wrote: the store may hold less (a push that failed), so
			// nothing is pulled over it.
			a.setVolume(i, func(s *agentapi.VolumeStatus) { s.Phase = agentapi.VolumeReady })
			a.record("volume", "volume %d (%s): kept as the job left it on the replica's disk; not copied in again", v.Index, v.MountPath)
			continue
		}
		signer := dataapi.Signer{Node: n, AppNode: appNode, Job: a.cfg.JobID, Volume: v.Index}
		if v.Dir != v.MountPath {
			a.record("volume", "volume %d (%s): copying in to %s (no VM here: a directory of the job's on the host)", v.Index, v.MountPath, v.Dir)
		} else {
			a.record("volume", "volume %d (%s): copying in", v.Index, v.MountPath)
		}
		start := time.Now()
		st, err := retried(ctx, func() (datasync.Stats, error) {
			return a.pull(ctx, retrySigner{signer}, v, datasync.Options{Progress: func(p datasync.Stats) {
				a.setVolumeQuiet(i, func(s *agentapi.VolumeStatus) {
					s.Objects, s.Bytes, s.TotalObjects, s.TotalBytes = p.Objects, p.Bytes, p.ListedObjects, p.ListedBytes
				})
			}})
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			r := cosmic.NewReason(syncReason(err), fmt.Sprintf("volume %d (%s): %v", v.Index, v.MountPath, err))
			a.failVolume(i, v, r, err)
			return &r
		}
		a.setVolume(i, func(s *agentapi.VolumeStatus) {
			s.Phase, s.Objects, s.Bytes = agentapi.VolumeReady, st.Objects, st.Bytes
		})
		a.record("volume", "volume %d (%s): %d objects, %d bytes copied in %v", v.Index, v.MountPath, st.Objects, st.Bytes, time.Since(start).Round(time.Millisecond))
		for _, k := range st.Skipped {
			a.record("volume", "volume %d (%s): object %q skipped: its name is no path inside the volume", v.Index, v.MountPath, k)
		}
	}
	return nil
}

// StopPushTimeout bounds the push of a job's RW volumes when its agent
// is stopped (the VM powers off: kill, delete, restart): what the job
// wrote goes back before the VM goes (docs/data.md). The racks wait for
// it (vmboot.StopPushWait).
const StopPushTimeout = 10 * time.Minute

// pushAtStop pushes the RW volumes once the agent is told to stop, after
// the command and the sessions have ended, unless the command's end
// pushed them already or they never came in (nothing the job wrote is in
// them then); within Config.StopPush.
func (a *Agent) pushAtStop() {
	a.mu.Lock()
	due := a.pulled && !a.pushed
	a.mu.Unlock()
	if !due || !slices.ContainsFunc(a.cfg.Volumes, func(v Volume) bool { return v.Push }) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(a.cfg.StopPush, StopPushTimeout))
	defer cancel()
	a.record("volume", "the replica stops: pushing its RW volumes back before it goes")
	a.pushVolumes(ctx)
}

// nonEmpty says whether dir exists and holds an entry.
func nonEmpty(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	names, _ := f.Readdirnames(1)
	return len(names) > 0
}

// cloneVolume clones volume i's Git repository into its directory, or
// keeps what an earlier run of the replica cloned there (a restart keeps
// the disk), and answers the reason the replica cannot run, or nil.
func (a *Agent) cloneVolume(ctx context.Context, i int, v Volume) *cosmic.Reason {
	a.record("volume", "volume %d (%s): cloning %s", v.Index, v.MountPath, v.Git)
	start := time.Now()
	st, err := gitsync.Clone(ctx, v.Git, v.Dir, gitsync.Options{Client: a.cfg.DataClient})
	switch {
	case errors.Is(err, fs.ErrExist):
		// The replica's disk was kept (a restart): its clone is kept as
		// the job left it. Anything else there is not the repository.
		if fi, serr := os.Stat(filepath.Join(v.Dir, ".git")); serr == nil && fi.IsDir() {
			a.setVolume(i, func(s *agentapi.VolumeStatus) { s.Phase = agentapi.VolumeReady })
			a.record("volume", "volume %d (%s): the clone of an earlier run, on the replica's disk, kept as it is", v.Index, v.MountPath)
			return nil
		}
		r := cosmic.NewReason(cosmic.ReasonVolumeSyncFailed, fmt.Sprintf("volume %d (%s): the mount path holds files that are no clone: give the volume an empty mount path", v.Index, v.MountPath))
		a.failVolume(i, v, r, errors.New(r.Message))
		return &r
	case err != nil:
		if ctx.Err() != nil {
			return nil
		}
		code := cosmic.ReasonVolumeSyncFailed
		if errors.Is(err, gitsync.ErrUnreachable) {
			code = cosmic.ReasonDatastoreUnreachable
		}
		r := cosmic.NewReason(code, fmt.Sprintf("volume %d (%s): clone of %s: %v", v.Index, v.MountPath, v.Git, err))
		a.failVolume(i, v, r, err)
		return &r
	}
	a.setVolume(i, func(s *agentapi.VolumeStatus) {
		s.Phase, s.Objects, s.Bytes = agentapi.VolumeReady, st.Files, st.Bytes
	})
	a.record("volume", "volume %d (%s): %d files, %d bytes cloned at %s (%s) in %v", v.Index, v.MountPath, st.Files, st.Bytes, st.Commit, st.Branch,
		time.Since(start).Round(time.Millisecond))
	for _, k := range st.Skipped {
		a.record("volume", "volume %d (%s): %q not written: a symbolic link or a submodule", v.Index, v.MountPath, k)
	}
	return nil
}

// pushVolumes sends back what the job wrote in each RW and RWD volume,
// one after the other, and answers why the replica fails if one could not
// be (its files stay where they are), or nil.
func (a *Agent) pushVolumes(ctx context.Context) *cosmic.Reason {
	a.syncMu.Lock()
	defer a.syncMu.Unlock()
	// A push that a kill cut short did not happen: the push at the stop
	// does it again (pushAtStop).
	defer func() {
		if ctx.Err() == nil {
			a.mu.Lock()
			a.pushed = true
			a.mu.Unlock()
		}
	}()
	n := a.Node()
	var appNode fabric.PublicKey
	for _, p := range a.cfg.Peers {
		if p.Role == agentapi.RoleAppNode {
			appNode = p.Key
		}
	}
	var failure *cosmic.Reason
	for _, v := range a.cfg.Volumes {
		if !v.Push || n == nil {
			continue
		}
		signer := retrySigner{dataapi.Signer{Node: n, AppNode: appNode, Job: a.cfg.JobID, Volume: v.Index, Target: v.Target}}
		start := time.Now()
		st, err := retried(ctx, func() (datasync.Stats, error) {
			return a.push(ctx, signer, v, datasync.Options{})
		})
		if err != nil {
			r := cosmic.NewReason(syncReason(err), fmt.Sprintf("volume %d (%s) not pushed, its files kept in the replica's disk: %v", v.Index, v.MountPath, err))
			a.recordFailure("volume", "volume %d (%s): not pushed: %v; the files are kept on the replica's disk", v.Index, v.MountPath, err)
			if failure == nil {
				failure = &r
			}
			continue
		}
		a.record("volume", "volume %d (%s): %d objects, %d bytes pushed, %d unchanged, %d deleted, in %v", v.Index, v.MountPath,
			st.Objects, st.Bytes, st.Unchanged, st.Deleted, time.Since(start).Round(time.Millisecond))
		for _, k := range st.Skipped {
			a.record("volume", "volume %d (%s): %q not pushed: not a regular file (a link, a device)", v.Index, v.MountPath, k)
		}
	}
	return failure
}

// syncReason is the reason code of a failed pull.
func syncReason(err error) cosmic.ReasonCode {
	switch {
	case errors.Is(err, datasync.ErrUnreachable):
		return cosmic.ReasonDatastoreUnreachable
	case errors.Is(err, datasync.ErrRefused):
		return cosmic.ReasonBadCredentials
	case errors.Is(err, datasync.ErrNoContainer):
		return cosmic.ReasonNoSuchContainer
	}
	return cosmic.ReasonVolumeSyncFailed
}

// retried runs sync again, with a backoff, while it fails to reach the
// app-node (errSignerUnreachable: it may be connecting yet, or have cut
// the agent's connection as its binding changed), for pullDeadline at
// most.
func retried(ctx context.Context, sync func() (datasync.Stats, error)) (datasync.Stats, error) {
	b := backoff.Backoff{Min: 200 * time.Millisecond, Max: 5 * time.Second}
	deadline := time.Now().Add(pullDeadline)
	for {
		st, err := sync()
		if err == nil || !errors.Is(err, errSignerUnreachable) || time.Now().After(deadline) || ctx.Err() != nil {
			return st, err
		}
		if !backoff.Sleep(ctx, b.Next()) {
			return st, err
		}
	}
}

// errSignerUnreachable marks a signing call that did not reach the
// app-node (it may be connecting yet): the pull is tried again.
var errSignerUnreachable = errors.New("the app-node did not answer")

// retrySigner marks the signer's failures to reach the app-node.
type retrySigner struct{ s datasync.Signer }

func (r retrySigner) Sign(ctx context.Context, op datasync.Op, keys []string, token string) ([]datasync.SignedRequest, error) {
	reqs, err := r.s.Sign(ctx, op, keys, token)
	if code := fabric.ErrorCode(err); err != nil && (code == "" || code == fabric.CodeUnavailable) {
		return nil, fmt.Errorf("%w: %w", errSignerUnreachable, err)
	}
	return reqs, err
}

func (a *Agent) failVolume(i int, v Volume, r cosmic.Reason, err error) {
	a.setVolume(i, func(s *agentapi.VolumeStatus) { s.Phase, s.Error = agentapi.VolumeFailed, err.Error() })
	a.mu.Lock()
	a.failure = &r
	a.mu.Unlock()
	a.recordFailure("volume", "volume %d (%s): not copied in: %s: the command is not started", v.Index, v.MountPath, r.Message)
	a.changed()
}

// setVolume changes volume i's status and tells the peers.
func (a *Agent) setVolume(i int, f func(*agentapi.VolumeStatus)) {
	a.setVolumeQuiet(i, f)
	a.changed()
}

// progressEvery bounds how often a copy's progress is told the peers.
const progressEvery = time.Second

// setVolumeQuiet changes volume i's status, telling the peers at most
// every progressEvery (the replica's progress in the job's status).
func (a *Agent) setVolumeQuiet(i int, f func(*agentapi.VolumeStatus)) {
	a.mu.Lock()
	f(&a.volumes[i])
	tell := time.Since(a.toldProgress) >= progressEvery
	if tell {
		a.toldProgress = time.Now()
	}
	a.mu.Unlock()
	if tell {
		a.changed()
	}
}

// dataSync pulls or pushes the volumes p names, one after the other, as
// the app-node asks (agentapi.MethodDataSync). A volume the agent does
// not sync (not a datastore volume), or a push of one that is read only,
// is refused whole before anything moves, and so is a datasync while the
// last one still runs. The sync runs apart from the call, in the agent's
// own context: it answers when the sync ends (at once with p.Detach), and
// a caller that goes does not cut it; Status.DataSync follows it.
func (a *Agent) dataSync(ctx context.Context, p agentapi.DataSyncParams) (agentapi.DataSyncReply, error) {
	if len(a.cfg.Volumes) == 0 {
		return agentapi.DataSyncReply{}, fabric.Errorf(fabric.CodeNotFound, "this agent syncs no volume: its rack does not sync volumes yet")
	}
	byIndex := map[int]Volume{}
	for _, v := range a.cfg.Volumes {
		if v.Git == "" {
			byIndex[v.Index] = v
		}
	}
	var vols []Volume
	for _, i := range p.Volumes {
		v, ok := byIndex[i]
		switch {
		case !ok:
			return agentapi.DataSyncReply{}, fabric.Errorf(fabric.CodeBadRequest, "volume %d is not a datastore volume of this job", i)
		case p.Direction == "push" && !v.Push:
			return agentapi.DataSyncReply{}, fabric.Errorf(fabric.CodeBadRequest, "volume %d (%s) is read only: nothing to push", i, v.MountPath)
		case p.Direction != "push" && p.Direction != "pull":
			return agentapi.DataSyncReply{}, fabric.Errorf(fabric.CodeBadRequest, "direction %q: want push or pull", p.Direction)
		}
		vols = append(vols, v)
	}
	if len(vols) == 0 {
		now := time.Now().UTC()
		return agentapi.DataSyncReply{Direction: p.Direction, StartedAt: now, EndedAt: now, Volumes: []agentapi.VolumeSync{}}, nil // nothing moves
	}
	n := a.Node()
	if n == nil {
		return agentapi.DataSyncReply{}, fabric.Errorf(fabric.CodeUnavailable, "the agent is not serving yet")
	}
	var appNode fabric.PublicKey
	for _, peer := range a.cfg.Peers {
		if peer.Role == agentapi.RoleAppNode {
			appNode = peer.Key
		}
	}
	st := &agentapi.DataSyncStatus{Direction: p.Direction, StartedAt: time.Now().UTC(), Volumes: []agentapi.VolumeSync{}}
	for _, v := range vols {
		st.Volumes = append(st.Volumes, agentapi.VolumeSync{Index: v.Index, MountPath: v.MountPath, State: agentapi.SyncQueued})
	}
	a.mu.Lock()
	switch {
	case a.closing || a.runCtx == nil:
		a.mu.Unlock()
		return agentapi.DataSyncReply{}, fabric.Errorf(fabric.CodeUnavailable, "the agent is stopping")
	case a.lastSync != nil && a.lastSync.EndedAt.IsZero():
		cur := a.lastSync
		a.mu.Unlock()
		return agentapi.DataSyncReply{}, fabric.Errorf(agentapi.CodeConflict, "a datasync (%s, started %s) still runs: its progress is in GET …/datasync", cur.Direction, cur.StartedAt.Format(time.RFC3339))
	}
	a.lastSync = st
	runCtx := a.runCtx
	begun := cloneDataSync(*st)
	done := make(chan agentapi.DataSyncReply, 1)
	a.syncs.Add(1)
	a.mu.Unlock()
	go func() {
		defer a.syncs.Done()
		done <- a.runDataSync(runCtx, n, appNode, p.Direction, vols, st)
	}()
	if p.Detach {
		return begun, nil
	}
	select {
	case r := <-done:
		return r, nil
	case <-ctx.Done():
		return agentapi.DataSyncReply{}, fabric.Errorf(fabric.CodeDeadlineExceeded, "the datasync goes on without this answer: its progress is in GET …/datasync")
	}
}

// runDataSync does datasync st: each volume in turn, its progress in st
// (under a.mu) as it goes. It answers st as it ended.
func (a *Agent) runDataSync(ctx context.Context, n *fabric.Node, appNode fabric.PublicKey, dir string, vols []Volume, st *agentapi.DataSyncStatus) agentapi.DataSyncReply {
	a.syncMu.Lock() // one sync at a time, the command's end's push among them
	defer a.syncMu.Unlock()
	for k, v := range vols {
		set := func(f func(*agentapi.VolumeSync)) {
			a.mu.Lock()
			f(&st.Volumes[k])
			a.mu.Unlock()
		}
		set(func(vs *agentapi.VolumeSync) { vs.State = agentapi.SyncRunning })
		opt := datasync.Options{Progress: func(p datasync.Stats) {
			set(func(vs *agentapi.VolumeSync) {
				vs.Objects, vs.Bytes = max(vs.Objects, p.Objects), max(vs.Bytes, p.Bytes)
				vs.TotalObjects, vs.TotalBytes = max(vs.TotalObjects, p.ListedObjects), max(vs.TotalBytes, p.ListedBytes)
			})
		}}
		start := time.Now()
		var stats datasync.Stats
		var err error
		if dir == "pull" {
			signer := retrySigner{dataapi.Signer{Node: n, AppNode: appNode, Job: a.cfg.JobID, Volume: v.Index}}
			stats, err = a.pull(ctx, signer, v, opt)
		} else {
			signer := retrySigner{dataapi.Signer{Node: n, AppNode: appNode, Job: a.cfg.JobID, Volume: v.Index, Target: v.Target}}
			stats, err = a.push(ctx, signer, v, opt)
		}
		set(func(vs *agentapi.VolumeSync) {
			vs.State, vs.Objects, vs.Bytes = agentapi.SyncDone, stats.Objects, stats.Bytes
			vs.Unchanged, vs.Deleted, vs.Skipped = stats.Unchanged, stats.Deleted, stats.Skipped
			if err != nil {
				vs.State, vs.Error, vs.Reason = agentapi.SyncFailed, err.Error(), string(syncReason(err))
			}
		})
		if err != nil {
			a.recordFailure("datasync", "volume %d (%s): %s failed: %v; its files are kept", v.Index, v.MountPath, dir, err)
		} else {
			a.record("datasync", "volume %d (%s): %s of %d objects, %d bytes (%d unchanged, %d deleted) in %v", v.Index, v.MountPath,
				dir, stats.Objects, stats.Bytes, stats.Unchanged, stats.Deleted, time.Since(start).Round(time.Millisecond))
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	st.EndedAt = time.Now().UTC()
	return cloneDataSync(*st)
}

// cloneDataSync is a copy of d that shares nothing with it.
func cloneDataSync(d agentapi.DataSyncStatus) agentapi.DataSyncStatus {
	d.Volumes = slices.Clone(d.Volumes)
	for i := range d.Volumes {
		d.Volumes[i].Skipped = slices.Clone(d.Volumes[i].Skipped)
	}
	return d
}
