package ork

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/ork/placement"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// Serve registers the ork's methods (orkapi and the workers' report) on r.
func (o *Ork) Serve(r fabric.Registrar) {
	orkapi.CreateJob.Handle(r, func(ctx context.Context, _ fabric.PublicKey, p orkapi.CreateJobParams) (cosmic.Job, error) {
		j, err := o.CreateJob(ctx, p)
		return j, wireError(err)
	})
	orkapi.GetJob.Handle(r, func(ctx context.Context, _ fabric.PublicKey, p orkapi.JobRef) (cosmic.Job, error) {
		j, err := o.GetJob(ctx, p.ID)
		return j, wireError(err)
	}, fabric.ReadOnly())
	orkapi.ListJobs.Handle(r, func(ctx context.Context, _ fabric.PublicKey, p orkapi.ListJobsParams) (orkapi.ListJobsReply, error) {
		out, err := o.ListJobs(ctx, p)
		return out, wireError(err)
	}, fabric.ReadOnly())
	orkapi.DeleteJob.Handle(r, func(ctx context.Context, _ fabric.PublicKey, p orkapi.DeleteJobParams) (cosmic.Job, error) {
		j, err := o.DeleteJob(ctx, p)
		return j, wireError(err)
	})
	orkapi.RestartJob.Handle(r, func(ctx context.Context, _ fabric.PublicKey, p orkapi.RestartJobParams) (cosmic.Job, error) {
		j, err := o.RestartJob(ctx, p)
		return j, wireError(err)
	})
	orkapi.KillJob.Handle(r, func(ctx context.Context, _ fabric.PublicKey, p orkapi.JobRef) (cosmic.Job, error) {
		j, err := o.KillJob(ctx, p.ID)
		return j, wireError(err)
	})
	orkapi.LabelJob.Handle(r, func(ctx context.Context, _ fabric.PublicKey, p orkapi.LabelJobParams) (cosmic.Job, error) {
		j, err := o.LabelJob(ctx, p)
		return j, wireError(err)
	})
	orkapi.SetRequireAuth.Handle(r, func(ctx context.Context, _ fabric.PublicKey, p orkapi.SetRequireAuthParams) (cosmic.Job, error) {
		j, err := o.SetRequireAuth(ctx, p)
		return j, wireError(err)
	})
	orkapi.RegisterRack.Handle(r, func(ctx context.Context, _ fabric.PublicKey, p orkapi.RegisterRackParams) (orkapi.RackInfo, error) {
		ri, err := o.RegisterRack(ctx, p)
		return ri, wireError(err)
	})
	orkapi.ListRacks.Handle(r, func(ctx context.Context, _ fabric.PublicKey, _ struct{}) (orkapi.ListRacksReply, error) {
		return o.ListRacks(), nil
	}, fabric.ReadOnly())
	orkapi.WatchJobs.Handle(r, func(ctx context.Context, _ fabric.PublicKey, p orkapi.WatchJobsParams) (orkapi.JobsVersion, error) {
		return o.WatchJobs(ctx, p)
	}, fabric.ReadOnly())
	orkapi.WatchPeers.Handle(r, func(ctx context.Context, _ fabric.PublicKey, p orkapi.WatchPeersParams) (orkapi.Peers, error) {
		return o.WatchPeers(ctx, p)
	})
	orkapi.DeleteVolume.Handle(r, func(ctx context.Context, _ fabric.PublicKey, p orkapi.VolumeRef) (struct{}, error) {
		return struct{}{}, wireError(o.DeleteVolume(ctx, p))
	})
	orkapi.ForgetRacks.Handle(r, func(ctx context.Context, _ fabric.PublicKey, p orkapi.ForgetRacksParams) (struct{}, error) {
		return struct{}{}, wireError(o.ForgetRacks(ctx, p))
	})
	orkapi.SetQuota.Handle(r, func(ctx context.Context, _ fabric.PublicKey, p orkapi.SetQuotaParams) (orkapi.Quota, error) {
		q, err := o.SetQuota(ctx, p)
		return q, wireError(err)
	})
	orkapi.DeleteQuota.Handle(r, func(ctx context.Context, _ fabric.PublicKey, p orkapi.QuotaRef) (struct{}, error) {
		return struct{}{}, wireError(o.DeleteQuota(ctx, p))
	})
	orkapi.ListQuotas.Handle(r, func(ctx context.Context, _ fabric.PublicKey, p orkapi.ListQuotasParams) (orkapi.ListQuotasReply, error) {
		out, err := o.ListQuotas(ctx, p)
		return out, wireError(err)
	}, fabric.ReadOnly())
	orkapi.UpdateJob.Handle(r, func(ctx context.Context, _ fabric.PublicKey, p orkapi.UpdateJobParams) (cosmic.Job, error) {
		j, err := o.UpdateJob(ctx, p)
		return j, wireError(err)
	})
	orkapi.ReportLoad.Handle(r, func(ctx context.Context, from fabric.PublicKey, p orkapi.LoadReport) (struct{}, error) {
		return struct{}{}, o.ReportLoad(from, p)
	})
	worker.ServeReporter(r, o)
}

// wireError maps domain errors to fabric error codes, once.
func wireError(err error) error {
	if err == nil {
		return nil
	}
	var fe *fabric.Error
	if errors.As(err, &fe) {
		return err
	}
	if fields := cosmic.FieldErrors(err); len(fields) > 0 {
		details := make([]orkapi.FieldError, len(fields))
		for i, f := range fields {
			details[i] = orkapi.FieldError{Field: f.Field, Message: f.Message, Reason: f.Reason}
		}
		return fabric.Errorf(orkapi.CodeInvalid, "%v", err).WithDetails(details)
	}
	if code := cosmic.CodeOf(err); code != "" {
		return fabric.Errorf(code, "%s", cosmic.MessageOf(err)) // the domain's code is the wire's
	}
	if errors.Is(err, store.ErrNotLeader) {
		// A deposed ork (its term ended; it stops at once): nothing was
		// written, and the app-node answers 503, try again, by when the
		// new leader serves.
		return fabric.Errorf(fabric.CodeUnavailable, "this ork no longer leads (another took the lease); nothing was changed, try again")
	}
	return err
}

func conflictf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", cosmic.ErrConflict, fmt.Sprintf(format, args...))
}

// ---- jobs

// CreateJob validates and admits a job: it fails at once if it can never be
// placed, else it is queued and placed as soon as GPUs allow.
func (o *Ork) CreateJob(ctx context.Context, p orkapi.CreateJobParams) (cosmic.Job, error) {
	id, err := cosmic.ParseJobID(p.ID)
	if err != nil {
		return cosmic.Job{}, err
	}
	spec := p.Spec
	spec.Default()
	if err := spec.Validate(); err != nil {
		return cosmic.Job{}, err
	}
	o.mu.Lock()
	if !o.locationKnownLocked(spec.Location) {
		o.mu.Unlock()
		return cosmic.Job{}, &cosmic.FieldError{Field: "location", Reason: cosmic.ReasonNoSuchLocation,
			Message: fmt.Sprintf("no rack is registered in location %q; known: %v", spec.Location, o.locationsLocked())}
	}
	if r := o.catalogueRefusalLocked(spec, p.Asked); r != nil {
		o.mu.Unlock()
		return cosmic.Job{}, &cosmic.FieldError{Field: r.Field, Reason: r.Reason.Code, Message: r.Reason.Message}
	}
	if existing, err := o.st.GetJob(ctx, id); err == nil {
		o.mu.Unlock()
		if reflect.DeepEqual(existing.Spec, spec) && existing.User == p.User {
			return o.annotate(existing), nil // a retried create
		}
		return cosmic.Job{}, conflictf("job %s exists with another spec", id)
	} else if !errors.Is(err, cosmic.ErrNotFound) {
		o.mu.Unlock()
		return cosmic.Job{}, err
	}
	if max := o.cfg.MaxJobsPerTeam; max > 0 {
		_, held, err := o.st.ListJobs(ctx, store.ListJobsQuery{Team: p.Team, Size: 1})
		if err != nil {
			o.mu.Unlock()
			return cosmic.Job{}, err
		}
		if held >= max {
			o.mu.Unlock()
			return cosmic.Job{}, fmt.Errorf("%w: team %s holds %d jobs, the most a team may hold; delete stopped or failed ones first", cosmic.ErrForbidden, p.Team, held)
		}
	}
	if spec.Name != "" {
		// Names are unique within a team, so that a job is addressed by
		// its name as by its ID (the ork is the one writer of jobs, and
		// this runs under its lock).
		same, _, err := o.st.ListJobs(ctx, store.ListJobsQuery{Team: p.Team, Name: spec.Name, Size: 1})
		if err != nil {
			o.mu.Unlock()
			return cosmic.Job{}, err
		}
		if len(same) > 0 {
			o.mu.Unlock()
			return cosmic.Job{}, conflictf("a job named %q exists in team %s (%s, %s): names are unique within a team; delete it or choose another name",
				spec.Name, p.Team, same[0].ID, same[0].Status.State)
		}
	}
	now := o.now()
	j := cosmic.NewJob(id, p.User, p.Team, spec, now)
	for i := range spec.Replicas() {
		setReplica(&j, i, func(*cosmic.ReplicaStatus) {})
	}
	vu := o.volumeUseLocked(j)
	if vu.impossible != nil {
		o.mu.Unlock()
		return cosmic.Job{}, &cosmic.FieldError{Field: "volumes", Reason: vu.impossible.Code, Message: vu.impossible.Message}
	}
	if d, ok := placement.PlaceOn(o.snap, j, vu.rack).(placement.Impossible); ok {
		// What can be known now is refused now, and nothing is stored: the
		// job could never run on this fleet.
		o.mu.Unlock()
		if vu.rack != "" && d.Reason.Code == cosmic.ReasonInvalidSpec {
			// The rack that keeps its standalone volume is of another location or model.
			return cosmic.Job{}, &cosmic.FieldError{Field: "volumes", Reason: d.Reason.Code, Message: d.Reason.Message}
		}
		return cosmic.Job{}, impossibleError(spec, d.Reason)
	}
	err = j.SetState(cosmic.StateQueued, nil, now)
	if err == nil {
		err = o.st.Update(ctx, func(tx Tx) error { return tx.CreateJob(ctx, j) })
	}
	if err != nil {
		o.mu.Unlock()
		return cosmic.Job{}, err
	}
	if j.Status.State == cosmic.StateQueued {
		o.enqueueLocked(j)
	}
	if spec.Autoscaled() {
		o.autoscaled[j.ID] = true
	}
	o.mu.Unlock()
	o.schedule(ctx)
	return o.GetJob(ctx, id)
}

// impossibleError is the invalid-field error a create gets for a job that
// could never be placed: the field that asks too much, with the reason
// code placement gave.
func impossibleError(spec cosmic.Spec, r cosmic.Reason) error {
	field := "resources.gpu"
	switch {
	case r.Code == cosmic.ReasonNoSuchLocation:
		field = "location"
	case r.Code == cosmic.ReasonNoSuchGPUModel:
		field = "resources.gpuModel"
	case r.Code == cosmic.ReasonExceedsNodeCPU:
		field = "resources.cpu"
	case r.Code == cosmic.ReasonExceedsNodeMemory:
		field = "resources.memory"
	case spec.Type == cosmic.TypeManagedInference && r.Code == cosmic.ReasonExceedsLocationGPUs:
		field = "inference.replicas"
	case spec.Type == cosmic.TypeManagedInference && spec.Inference != nil && spec.Inference.GPUsPerReplica > 0:
		field = "inference.gpusPerReplica"
	}
	return &cosmic.FieldError{Field: field, Reason: r.Code, Message: r.Message}
}

// catalogueRefusalLocked says why no rack of spec's location (of its GPU
// model, if it names one) can run spec, by the catalogues the racks'
// workers reported: nil if one can, or one has not reported its catalogue
// (nothing is known against it). The refusal is the first rack's, by ID.
func (o *Ork) catalogueRefusalLocked(spec cosmic.Spec, asked cosmic.Resources) *cosmic.CatalogueRefusal {
	var first *cosmic.CatalogueRefusal
	for _, id := range keys(o.racks) {
		r := o.racks[id]
		if r.Rack.Location != spec.Location || spec.Resources.GPUModel != "" && !rackHasModel(r, spec.Resources.GPUModel) {
			continue
		}
		if r.catalogue == nil {
			return nil
		}
		refusal := r.catalogue.Refuses(spec, asked)
		if refusal == nil {
			return nil
		}
		if first == nil {
			first = refusal
		}
	}
	return first
}

// rackHasModel says whether the rack, or one of its nodes, has GPUs of
// model.
func rackHasModel(r *rackState, model string) bool {
	if r.Rack.GPUModel == model {
		return true
	}
	return slices.ContainsFunc(r.Nodes, func(n cosmic.Node) bool { return n.GPUModel == model })
}

func (o *Ork) locationKnownLocked(loc string) bool {
	for _, r := range o.racks {
		if r.Rack.Location == loc {
			return true
		}
	}
	return false
}

func (o *Ork) locationsLocked() []string {
	var out []string
	for _, r := range o.racks {
		if !slices.Contains(out, r.Rack.Location) {
			out = append(out, r.Rack.Location)
		}
	}
	sort.Strings(out)
	return out
}

// GetJob returns a job with its queue position filled in.
func (o *Ork) GetJob(ctx context.Context, id string) (cosmic.Job, error) {
	j, err := o.st.GetJob(ctx, id)
	if err != nil {
		return j, err
	}
	return o.annotate(j), nil
}

// ListJobs lists jobs.
func (o *Ork) ListJobs(ctx context.Context, p orkapi.ListJobsParams) (orkapi.ListJobsReply, error) {
	jobs, total, err := o.st.ListJobs(ctx, store.ListJobsQuery{Team: p.Team, User: p.User, Name: p.Name, States: p.States, Labels: p.Labels,
		UpdatedAfter: p.UpdatedAfter, UpdatedBefore: p.UpdatedBefore, Sort: p.Sort, Order: p.Order, Page: p.Page, Size: p.Size})
	if err != nil {
		return orkapi.ListJobsReply{}, err
	}
	for i := range jobs {
		jobs[i] = o.annotate(jobs[i])
	}
	if jobs == nil {
		jobs = []cosmic.Job{}
	}
	return orkapi.ListJobsReply{Jobs: jobs, Total: total}, nil
}

// heldLocked returns the job's reservations grouped by rack.
func (o *Ork) heldLocked(jobID string) map[string][]cosmic.Reservation {
	out := map[string][]cosmic.Reservation{}
	for _, r := range o.snap.Reservations() {
		if r.JobID == jobID {
			out[r.Rack] = append(out[r.Rack], r)
		}
	}
	return out
}

// onRacks calls f on the worker of each rack, in turn; the first error wins.
func (o *Ork) onRacks(ctx context.Context, racks []string, f func(context.Context, worker.Worker) error) error {
	for _, id := range racks {
		o.mu.Lock()
		r := o.racks[id]
		o.mu.Unlock()
		if r == nil {
			continue
		}
		cctx, cancel := o.workerCtx(ctx)
		err := f(cctx, r.w)
		cancel()
		if err != nil {
			return fmt.Errorf("rack %s: %w", id, err)
		}
	}
	return nil
}

func keys[M ~map[string]V, V any](m M) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// KillJob stops a job: its VMIs go, its GPUs are released, its storage stays.
func (o *Ork) KillJob(ctx context.Context, id string) (cosmic.Job, error) {
	return o.stopJob(ctx, id, cosmic.NewReason(cosmic.ReasonKilled, ""))
}

// stopJob stops a job's VMIs on its workers, then releases its GPUs and
// moves it to stopped with reason (killed, or timeout).
func (o *Ork) stopJob(ctx context.Context, id string, reason cosmic.Reason) (cosmic.Job, error) {
	o.mu.Lock()
	j, err := o.st.GetJob(ctx, id)
	if err != nil {
		o.mu.Unlock()
		return j, err
	}
	if err := j.KillAllowed(); err != nil {
		o.mu.Unlock()
		return j, err
	}
	if j.Status.State == cosmic.StateStopped {
		o.mu.Unlock()
		return j, nil
	}
	racks := keys(o.heldLocked(id))
	o.mu.Unlock()
	// An Apply of the job still on its way would land after the Stop and
	// hold the GPUs released below: the Stop follows it.
	o.inflight.wait(id)
	if err := o.onRacks(ctx, racks, func(ctx context.Context, w worker.Worker) error {
		return w.Stop(ctx, worker.ReplicaRef{JobID: id, Replica: worker.AllReplicas})
	}); err != nil {
		return j, fabric.Errorf(fabric.CodeUnavailable, "stop job on its worker: %v", err)
	}
	return o.releaseAll(ctx, id, cosmic.StateStopped, reason)
}

// releaseAll frees every GPU of the job and moves it and its replicas to
// state, in one transaction. A stop keeps the GPUs of the replicas whose
// VMs power off, their agents pushing the job's volumes, until their
// racks report them off (poweroff.go).
func (o *Ork) releaseAll(ctx context.Context, id string, state cosmic.State, reason cosmic.Reason) (cosmic.Job, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.dequeueLocked(id)
	var kept map[int]bool
	j, err := o.updateJobLocked(ctx, id, func(tx Tx, j *cosmic.Job) error {
		kept = nil
		if state == cosmic.StateStopped {
			kept = o.poweringOffLocked(*j)
		}
		if len(kept) == 0 {
			if err := tx.ReleaseGPUs(ctx, id, store.AllReplicas); err != nil {
				return err
			}
		}
		for _, rs := range o.heldLocked(id) {
			for _, r := range rs {
				if len(kept) > 0 && !kept[r.Replica] {
					if err := tx.ReleaseGPUs(ctx, id, r.Replica); err != nil {
						return err
					}
				}
			}
		}
		for i := range j.Status.Replicas {
			j.Status.Replicas[i].State = state
		}
		if j.Status.State == state {
			return nil
		}
		return j.SetState(state, &reason, o.now())
	})
	if err != nil {
		return j, err
	}
	if state == cosmic.StateStopped {
		o.boundStoppingLocked(j)
	}
	if len(kept) == 0 {
		o.snap.ReleaseJob(id)
		o.releaseHeldLocked(id, store.AllReplicas)
	} else {
		for _, rs := range o.heldLocked(id) {
			for _, r := range rs {
				if kept[r.Replica] {
					continue
				}
				if err := o.snap.Release(r); err != nil {
					o.log.Error("release in snapshot", "job_id", id, "err", err)
				}
				o.releaseHeldLocked(id, r.Replica)
			}
		}
		o.poweringOff[id] = o.now().Add(powerOffWait)
	}
	o.boundReleasedLocked(id, -1)
	o.poke()
	return j, nil
}

// RestartJob replaces a job's (or one replica's) VMIs, keeping storage and
// GPUs. A failed or stopped job, which holds no GPUs, is queued again.
func (o *Ork) RestartJob(ctx context.Context, p orkapi.RestartJobParams) (cosmic.Job, error) {
	return o.restartJob(ctx, p, cosmic.NewReason(cosmic.ReasonRestartRequested, ""))
}

// restartJob is RestartJob, giving the restarting replicas and job reason
// (restart_requested, or timeout for timeoutAutoRestart).
func (o *Ork) restartJob(ctx context.Context, p orkapi.RestartJobParams, reason cosmic.Reason) (cosmic.Job, error) {
	o.mu.Lock()
	j, err := o.st.GetJob(ctx, p.ID)
	if err != nil {
		o.mu.Unlock()
		return j, err
	}
	if p.Replica != nil && (*p.Replica < 0 || *p.Replica >= j.Spec.Replicas()) {
		o.mu.Unlock()
		return j, &cosmic.FieldError{Field: "replica", Message: fmt.Sprintf("job %s has replicas 0 to %d", p.ID, j.Spec.Replicas()-1)}
	}
	if p.Replica != nil {
		if err := j.ReplicaActionAllowed(*p.Replica, "restarted"); err != nil {
			o.mu.Unlock()
			return j, err
		}
	}
	if err := j.RestartAllowed(); err != nil {
		o.mu.Unlock()
		return j, err
	}
	if _, off := o.poweringOff[j.ID]; off && j.Status.State == cosmic.StateStopped && o.holdsAnyLocked(j) {
		o.mu.Unlock()
		return j, fabric.Errorf(orkapi.CodeConflict, "job %s is stopped and its VM still powers off, its agent pushing the job's volumes (up to %v): restart it once its GPUs are released", j.ID, orkapi.StopPushWait)
	}
	if j.Status.State == cosmic.StateQueued {
		o.mu.Unlock()
		return o.annotate(j), nil // nothing runs yet
	}
	if j.Spec.Autoscaled() && j.Spec.Replicas() == 0 && p.Replica == nil {
		// At zero replicas there is nothing to restart in place: a
		// stopped or failed job starts again with the scaler's first
		// count; a serving one stays as it is (a request wakes it).
		if j.Status.State != cosmic.StateFailed && j.Status.State != cosmic.StateStopped {
			o.mu.Unlock()
			return o.annotate(j), nil
		}
		j, err = o.updateJobLocked(ctx, p.ID, func(_ Tx, j *cosmic.Job) error {
			j.Spec.Inference.Replicas = max(j.Spec.Inference.Autoscaling.MinReplicas, 1)
			j.Status.Replicas = nil
			for i := range j.Spec.Replicas() {
				setReplica(j, i, func(*cosmic.ReplicaStatus) {})
			}
			j.Status.ExitCode = nil
			return j.SetState(cosmic.StateQueued, nil, o.now())
		})
		if err == nil {
			o.enqueueLocked(j)
		}
		o.mu.Unlock()
		if err != nil {
			return j, err
		}
		o.poke()
		return o.annotate(j), nil
	}
	// Replicas holding GPUs are restarted in place; the others are queued.
	held := map[int]cosmic.Reservation{}
	for _, rs := range o.heldLocked(p.ID) {
		for _, r := range rs {
			held[r.Replica] = r
		}
	}
	selected := func(i int) bool { return p.Replica == nil || *p.Replica == i }
	var inPlace []cosmic.Reservation
	requeue := false
	for i := range j.Spec.Replicas() {
		if !selected(i) {
			continue
		}
		if i < len(j.Status.Replicas) && (j.Status.Replicas[i].State == cosmic.StateDeleting || j.Status.Replicas[i].Drain != nil) {
			continue // going (a rollout replaces it, or a scale-down took it): not restarted
		}
		if r, ok := held[i]; ok {
			inPlace = append(inPlace, r)
		} else {
			requeue = true
		}
	}
	o.mu.Unlock()
	for _, r := range inPlace {
		err := o.onRacks(ctx, []string{r.Rack}, func(ctx context.Context, w worker.Worker) error {
			return w.Restart(ctx, worker.ReplicaRef{JobID: p.ID, Replica: r.Replica})
		})
		if err != nil {
			return j, fabric.Errorf(fabric.CodeUnavailable, "restart replica %d: %v", r.Replica, err)
		}
	}
	o.mu.Lock()
	j, err = o.updateJobLocked(ctx, p.ID, func(_ Tx, j *cosmic.Job) error {
		for _, r := range inPlace {
			// The replica's new VMIs have the rack's agent deadline
			// from now.
			deadline := o.now().Add(o.agentDeadlineLocked(r.Rack))
			setReplica(j, r.Replica, func(rs *cosmic.ReplicaStatus) {
				rs.State, rs.Reason = cosmic.StateRestarting, &reason
				rs.AgentDeadline, rs.Progress = deadline, nil
			})
		}
		for i := range j.Spec.Replicas() {
			if _, ok := held[i]; !ok && selected(i) {
				setReplica(j, i, func(rs *cosmic.ReplicaStatus) { rs.State, rs.Reason, rs.Nodes = cosmic.StateQueued, nil, nil })
			}
		}
		if j.Status.State == cosmic.StateFailed || j.Status.State == cosmic.StateStopped {
			j.Status.ExitCode = nil
			return j.SetState(cosmic.StateQueued, nil, o.now())
		}
		if len(inPlace) > 0 && p.Replica == nil && (j.Status.State == cosmic.StateRestarting || cosmic.CanTransition(j.Status.State, cosmic.StateRestarting)) {
			// Restarting already, when the worker's report of the
			// restart came first: the reason is this restart's.
			return j.SetState(cosmic.StateRestarting, &reason, o.now())
		}
		return o.setAggregate(j)
	})
	if err == nil && requeue {
		o.enqueueLocked(j)
	}
	o.mu.Unlock()
	if err != nil {
		return j, err
	}
	o.poke()
	return o.annotate(j), nil
}

// DeleteJob removes a job (or one replica) and everything it created. A job
// holding GPUs moves to deleting until its worker confirms; the record goes
// then. A forced delete of a job whose agents push its volumes kills it
// first (killBeforeDelete).
func (o *Ork) DeleteJob(ctx context.Context, p orkapi.DeleteJobParams) (cosmic.Job, error) {
	if p.Replica != nil {
		return o.deleteReplica(ctx, p)
	}
	if p.Force {
		p.Force = !o.killBeforeDelete(ctx, p.ID)
	}
	o.mu.Lock()
	j, err := o.st.GetJob(ctx, p.ID)
	if err != nil {
		o.mu.Unlock()
		return j, err
	}
	if err := j.DeleteAllowed(p.Force); err != nil {
		o.mu.Unlock()
		return j, err
	}
	held := o.heldLocked(p.ID)
	if len(held) == 0 {
		// No GPUs: no VMI runs. Its disks, if any, are removed by every
		// worker of the location (idempotent; orphans are also removed when
		// a worker reports a job the store does not know).
		o.dequeueLocked(p.ID)
		err := o.st.Update(ctx, func(tx Tx) error { return tx.DeleteJob(ctx, p.ID) })
		var racks []string
		for id, r := range o.racks {
			if r.Rack.Location == j.Spec.Location && r.reachable {
				racks = append(racks, id)
			}
		}
		o.mu.Unlock()
		if err != nil {
			return j, err
		}
		o.goBackground(func() {
			for _, id := range racks {
				o.onRacks(context.WithoutCancel(ctx), []string{id}, func(ctx context.Context, w worker.Worker) error {
					return w.Delete(ctx, worker.DeleteParams{JobID: p.ID, Replica: worker.AllReplicas, Force: true})
				})
			}
		})
		j.Status.State = cosmic.StateDeleting
		return j, nil
	}
	j, err = o.updateJobLocked(ctx, p.ID, func(_ Tx, j *cosmic.Job) error {
		if j.Status.State == cosmic.StateDeleting {
			return nil
		}
		return j.SetState(cosmic.StateDeleting, nil, o.now())
	})
	o.mu.Unlock()
	if err != nil {
		return j, err
	}
	if err := o.requestDelete(ctx, p.ID, p.Force); err != nil {
		o.log.Warn("delete pending on worker; retried by reconcile", "job_id", p.ID, "err", err)
	}
	return j, nil
}

// killBeforeDelete stops a job a forced delete takes whose agents push
// its volumes at the end, as a kill does: its VMs power off, pushing what
// the job wrote, and keep their GPUs until they are off (poweroff.go). It
// says whether it did, and the delete then follows the power-off instead
// of cutting it; a kill that fails (the rack cannot be reached) leaves
// the delete forced.
func (o *Ork) killBeforeDelete(ctx context.Context, id string) bool {
	j, err := o.st.GetJob(ctx, id)
	if err != nil || !j.Status.State.RunsVMs() || !j.Spec.PushesVolumes() {
		return false
	}
	reason := cosmic.NewReason(cosmic.ReasonKilled, "deleted with force: the VMs power off, pushing the job's volumes, then go")
	if _, err := o.stopJob(ctx, id, reason); err != nil {
		o.log.Warn("kill before a forced delete; deleting at once", "job_id", id, "err", err)
		return false
	}
	return true
}

// requestDelete asks the workers holding a deleting job's GPUs to delete
// it. Each replica's GPUs are released when its worker reports it gone, or
// no longer lists it, and the record goes with the last (applyReport).
func (o *Ork) requestDelete(ctx context.Context, id string, force bool) error {
	o.mu.Lock()
	racks := keys(o.heldLocked(id))
	o.mu.Unlock()
	return o.onRacks(ctx, racks, func(ctx context.Context, w worker.Worker) error {
		return w.Delete(ctx, worker.DeleteParams{JobID: id, Replica: worker.AllReplicas, Force: force})
	})
}

// deleteReplica removes one replica of a Managed Inference Job that has
// not started yet: its VMIs, disks and GPUs go, and the replica is queued
// to be placed afresh (perhaps elsewhere), as a deleted pod of a
// Deployment is made anew; the job keeps its replica count. A replica
// already queued has nothing to remove.
func (o *Ork) deleteReplica(ctx context.Context, p orkapi.DeleteJobParams) (cosmic.Job, error) {
	o.mu.Lock()
	j, err := o.st.GetJob(ctx, p.ID)
	if err != nil {
		o.mu.Unlock()
		return j, err
	}
	n := *p.Replica
	if n < 0 || n >= j.Spec.Replicas() {
		o.mu.Unlock()
		return j, &cosmic.FieldError{Field: "replica", Message: fmt.Sprintf("job %s has replicas 0 to %d", p.ID, j.Spec.Replicas()-1)}
	}
	if j.Status.State == cosmic.StateDeleting {
		o.mu.Unlock()
		return o.annotate(j), nil // the whole job is going
	}
	if err := j.ReplicaActionAllowed(n, "deleted"); err != nil {
		o.mu.Unlock()
		return j, err
	}
	res, held := o.snap.Reserved(p.ID, n)
	o.mu.Unlock()
	if !held {
		return o.annotate(j), nil
	}
	{
		if err := o.onRacks(ctx, []string{res.Rack}, func(ctx context.Context, w worker.Worker) error {
			return w.Delete(ctx, worker.DeleteParams{JobID: p.ID, Replica: n, Force: p.Force})
		}); err != nil {
			return j, fabric.Errorf(fabric.CodeUnavailable, "delete replica %d: %v", n, err)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	// The replica keeps its GPUs until its worker reports it gone; then
	// reportRules queues it again and applyReport puts the job back in the
	// queue.
	reason := cosmic.NewReason(cosmic.ReasonReplicaDeleted, fmt.Sprintf("replica %d was deleted; it is placed again once its VMIs are gone", n))
	j, err = o.updateJobLocked(ctx, p.ID, func(tx Tx, j *cosmic.Job) error {
		setReplica(j, n, func(rs *cosmic.ReplicaStatus) { rs.State, rs.Reason = cosmic.StateDeleting, &reason })
		return o.setAggregate(j)
	})
	return o.annotate(j), err
}

// LabelJob sets a label, or removes it when the value is empty.
func (o *Ork) LabelJob(ctx context.Context, p orkapi.LabelJobParams) (cosmic.Job, error) {
	if p.Value != "" {
		if err := cosmic.ValidateLabel("name", p.Name, p.Value); err != nil {
			return cosmic.Job{}, err
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	j, err := o.updateJobLocked(ctx, p.ID, func(_ Tx, j *cosmic.Job) error {
		if p.Value == "" {
			delete(j.Spec.Labels, p.Name)
			return nil
		}
		if j.Spec.Labels == nil {
			j.Spec.Labels = map[string]string{}
		}
		j.Spec.Labels[p.Name] = p.Value
		return nil
	})
	return j, err
}

// SetRequireAuth sets inference.requireAuth of a managed-inference job, in
// one transaction that bumps the jobs' version (a job of another type is
// a conflict). It changes nothing the workers run: proxy-inference reads
// the flag from the job list (its model list, kept 1 s).
func (o *Ork) SetRequireAuth(ctx context.Context, p orkapi.SetRequireAuthParams) (cosmic.Job, error) {
	o.mu.Lock()
	j, err := o.updateJobLocked(ctx, p.ID, func(_ Tx, j *cosmic.Job) error {
		if j.Spec.Type != cosmic.TypeManagedInference || j.Spec.Inference == nil {
			return conflictf("job %s is a %s job: only a managed-inference job has \"require authorization\"", j.ID, j.Spec.Type)
		}
		in := *j.Spec.Inference
		in.RequireAuth = &p.RequireAuth
		j.Spec.Inference = &in
		return nil
	})
	o.mu.Unlock()
	if err != nil {
		return cosmic.Job{}, err
	}
	return o.annotate(j), nil // annotate takes the lock
}

// ---- racks

// RegisterRack registers or updates a rack and starts talking to its worker.
func (o *Ork) RegisterRack(ctx context.Context, p orkapi.RegisterRackParams) (orkapi.RackInfo, error) {
	rack := p.Rack
	if rack.Type == "" {
		rack.Type = cosmic.RackTypeServer
	}
	if err := rack.Validate(); err != nil {
		return orkapi.RackInfo{}, err
	}
	key, err := fabric.ParsePublicKey(rack.WorkerKey)
	if err != nil {
		return orkapi.RackInfo{}, &cosmic.FieldError{Field: "workerKey", Message: err.Error()}
	}
	for _, a := range p.WorkerAddrs {
		if _, _, err := fabric.ParsePeer(rack.WorkerKey + "@" + a); err != nil {
			return orkapi.RackInfo{}, &cosmic.FieldError{Field: "workerAddrs", Message: err.Error()}
		}
	}
	o.mu.Lock()
	// A location has one placement policy: its racks agree on it.
	if rack.PlacementPolicy != "" {
		for _, id := range keys(o.racks) {
			other := o.racks[id].Rack
			if id != rack.ID && other.Location == rack.Location && other.PlacementPolicy != "" && other.PlacementPolicy != rack.PlacementPolicy {
				o.mu.Unlock()
				return orkapi.RackInfo{}, conflictf("rack %s of location %s places by %s: the racks of a location share one placement policy",
					id, rack.Location, other.PlacementPolicy)
			}
		}
	}
	old := o.racks[rack.ID]
	sr := StoredRack{Rack: rack, WorkerAddrs: p.WorkerAddrs}
	if old != nil {
		if old.Rack.Location != rack.Location || old.Rack.WorkerKey != rack.WorkerKey {
			if len(o.rackReservationsLocked(rack.ID)) > 0 {
				o.mu.Unlock()
				return orkapi.RackInfo{}, conflictf("rack %s holds jobs; it cannot change location or worker key", rack.ID)
			}
		}
		sr.Nodes, sr.Overhead = old.Nodes, old.Overhead
		sr.Rack.CreatedAt = old.Rack.CreatedAt
	} else {
		sr.Rack.CreatedAt = o.now().UTC().Truncate(time.Second)
	}
	if err := o.st.Update(ctx, func(tx Tx) error { return tx.PutRack(ctx, sr) }); err != nil {
		o.mu.Unlock()
		return orkapi.RackInfo{}, err
	}
	o.racks[rack.ID] = &rackState{StoredRack: sr, w: o.dial(key, p.WorkerAddrs)}
	o.bindRackLocked(rack.ID, rack.WorkerKey)
	o.peersChangedLocked()
	err = o.rebuildLocked(ctx)
	o.mu.Unlock()
	if err != nil {
		return orkapi.RackInfo{}, err
	}
	// A first look at the worker, briefly: a worker that is not up yet is
	// shown unreachable and picked up by the heartbeat.
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	o.reconcileRack(rctx, rack.ID)
	cancel()
	o.poke()
	for _, ri := range o.ListRacks().Racks {
		if ri.ID == rack.ID {
			return ri, nil
		}
	}
	return orkapi.RackInfo{}, fmt.Errorf("rack %s vanished while registering", rack.ID)
}

func (o *Ork) rackReservationsLocked(id string) []cosmic.Reservation {
	var out []cosmic.Reservation
	for _, r := range o.snap.Reservations() {
		if r.Rack == id {
			out = append(out, r)
		}
	}
	return out
}

// ListRacks lists the racks with their capacity.
func (o *Ork) ListRacks() orkapi.ListRacksReply {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := orkapi.ListRacksReply{Racks: []orkapi.RackInfo{}}
	for _, id := range keys(o.racks) {
		r := o.racks[id]
		ri := orkapi.RackInfo{Rack: r.Rack, Nodes: slices.Clone(r.Nodes), Reachable: r.reachable, WorkerAddrs: r.WorkerAddrs, Problem: r.problem, Note: r.note, Catalogue: r.catalogue}
		for _, v := range r.volumes {
			v.Rack = id
			ri.Volumes = append(ri.Volumes, v)
		}
		if ri.Nodes == nil {
			ri.Nodes = []cosmic.Node{}
		}
		for i, n := range ri.Nodes {
			if free, ok := o.snap.Free(id, n.Name); ok {
				// The snapshot knows which GPUs no reservation holds; of
				// those, only a usable node's can take a replica.
				n.UsedGPUs = max(n.GPUs-len(free), 0)
				if n.Ready && n.Schedulable {
					n.FreeGPUs = len(free)
				}
			}
			n.UsedCPUMilli, n.UsedMemoryMiB, _ = o.snap.Used(id, n.Name)
			ri.GPUs += n.GPUs
			ri.FreeGPUs += n.FreeGPUs
			ri.Nodes[i] = n
		}
		out.Racks = append(out.Racks, ri)
	}
	return out
}

// ForgetRacks removes racks. Jobs holding GPUs there make it a conflict
// unless Force, which fails them with rack_removed.
func (o *Ork) ForgetRacks(ctx context.Context, p orkapi.ForgetRacksParams) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, id := range p.IDs {
		if o.racks[id] == nil {
			return fmt.Errorf("%w: no rack %q", cosmic.ErrNotFound, id)
		}
		if rs := o.rackReservationsLocked(id); len(rs) > 0 && !p.Force {
			return conflictf("rack %s holds GPUs of %d replicas; delete those jobs or use force", id, len(rs))
		}
	}
	reason := cosmic.NewReason(cosmic.ReasonRackRemoved, "")
	for _, id := range p.IDs {
		for _, res := range o.rackReservationsLocked(id) {
			_, err := o.updateJobLocked(ctx, res.JobID, func(tx Tx, j *cosmic.Job) error {
				if err := tx.ReleaseGPUs(ctx, res.JobID, res.Replica); err != nil {
					return err
				}
				setReplica(j, res.Replica, func(rs *cosmic.ReplicaStatus) { rs.State, rs.Reason = cosmic.StateFailed, &reason })
				return o.setAggregate(j)
			})
			if err != nil {
				return err
			}
			o.boundReleasedLocked(res.JobID, res.Replica)
		}
		if err := o.st.Update(ctx, func(tx Tx) error { return tx.DeleteRack(ctx, id) }); err != nil {
			return err
		}
		delete(o.racks, id)
		o.bindRackLocked(id, "")
		o.peersChangedLocked()
	}
	if err := o.rebuildLocked(ctx); err != nil {
		return err
	}
	o.poke()
	return nil
}
