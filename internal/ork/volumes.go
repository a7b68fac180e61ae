package ork

import (
	"context"
	"fmt"
	"slices"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// Standalone volumes (docs/data.md, "Standalone volumes"): a rack keeps
// each as a disk and reports it (worker.Capacity.Volumes), with the job
// that has it mounted. A job that mounts one is placed only on the rack
// that keeps it (placement.PlaceOn), and only while no other job holds
// it: neither one holding GPUs (placed, perhaps not reported yet) nor
// one the rack says has it mounted (a VM still powering off). A volume
// no rack keeps yet is made where the first job that mounts it runs.

// volumeUse is where a job's standalone volumes keep it and what holds
// them.
type volumeUse struct {
	// rack is the rack the job must run on ("": any).
	rack string
	// busy, when set, is why the job waits (volume_in_use), and
	// waitingFor what it waits for, in the words of status.waitingFor.
	busy       *cosmic.Reason
	waitingFor string
	// impossible, when set, is why the job can never run (its volumes
	// are kept on two racks).
	impossible *cosmic.Reason
}

// volumeUseLocked says where job's standalone volumes keep it and whether
// another job holds one.
func (o *Ork) volumeUseLocked(job cosmic.Job) volumeUse {
	var u volumeUse
	names := job.Spec.StandaloneVolumes()
	if len(names) == 0 {
		return u
	}
	where := map[string]string{} // rack → the volume that keeps the job there
	for _, name := range names {
		key := cosmic.VolumeKey(job.Team, name)
		if o.volumesDeleting[key] && u.busy == nil {
			// Placed now, its VM could find the volume half removed, or
			// an empty one made before the rack's delete removed it.
			r := cosmic.NewReason(cosmic.ReasonVolumeInUse, fmt.Sprintf("volume %s is being deleted: the job mounts a new, empty one once that is done", name))
			u.busy, u.waitingFor = &r, fmt.Sprintf("volume %s, being deleted", name)
		}
		for _, id := range keys(o.jobVolumes) {
			if id == job.ID || !slices.Contains(o.jobVolumes[id], key) {
				continue
			}
			if u.busy == nil {
				r := cosmic.NewReason(cosmic.ReasonVolumeInUse, fmt.Sprintf("volume %s is mounted by job %s", name, id))
				u.busy, u.waitingFor = &r, fmt.Sprintf("volume %s, mounted by job %s", name, id)
			}
			if res, ok := o.snap.Reserved(id, 0); ok {
				where[res.Rack] = name
			}
		}
		for _, rid := range keys(o.racks) {
			for _, v := range o.racks[rid].volumes {
				if v.Team != job.Team || v.Name != name {
					continue
				}
				where[rid] = name
				if v.Job != "" && v.Job != job.ID && u.busy == nil {
					r := cosmic.NewReason(cosmic.ReasonVolumeInUse, fmt.Sprintf("volume %s is mounted by job %s, whose VM rack %s has not stopped yet", name, v.Job, rid))
					u.busy, u.waitingFor = &r, fmt.Sprintf("volume %s, mounted by job %s, whose VM on rack %s has not stopped yet", name, v.Job, rid)
				}
			}
		}
	}
	racks := keys(where)
	switch len(racks) {
	case 0:
	case 1:
		u.rack = racks[0]
	default:
		r := cosmic.NewReason(cosmic.ReasonInvalidSpec, fmt.Sprintf("the job's standalone volumes are kept on different racks (%s on %s, %s on %s): a job mounts volumes of one rack",
			where[racks[0]], racks[0], where[racks[1]], racks[1]))
		u.impossible = &r
	}
	return u
}

// holdVolumesLocked notes the standalone volumes of a job that holds GPUs.
func (o *Ork) holdVolumesLocked(job cosmic.Job) {
	names := job.Spec.StandaloneVolumes()
	if len(names) == 0 {
		return
	}
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = cosmic.VolumeKey(job.Team, n)
		for _, r := range o.racks {
			delete(r.volumesGone, keys[i]) // made anew where the job runs
		}
	}
	o.jobVolumes[job.ID] = keys
}

// DeleteVolume removes a team's standalone volume, and what it holds,
// from the rack that keeps it: not found when no rack reports it, a
// conflict while a job holding GPUs mounts it (the rack refuses too while
// a VM has it, one still powering off included).
func (o *Ork) DeleteVolume(ctx context.Context, p orkapi.VolumeRef) error {
	o.mu.Lock()
	key := cosmic.VolumeKey(p.Team, p.Name)
	rack := ""
	for _, id := range keys(o.racks) {
		if slices.ContainsFunc(o.racks[id].volumes, func(v cosmic.StoredVolume) bool { return v.Team == p.Team && v.Name == p.Name }) {
			rack = id
			break
		}
	}
	if rack == "" {
		o.mu.Unlock()
		return fmt.Errorf("%w: team %s has no volume %s", cosmic.ErrNotFound, p.Team, p.Name)
	}
	for _, id := range keys(o.jobVolumes) {
		if slices.Contains(o.jobVolumes[id], key) {
			o.mu.Unlock()
			return conflictf("volume %s is mounted by job %s: delete it once that job has stopped", p.Name, id)
		}
	}
	if o.volumesDeleting[key] {
		o.mu.Unlock()
		return conflictf("volume %s is being deleted already", p.Name)
	}
	// No job that mounts it is placed until the rack has answered
	// (volumeUseLocked).
	o.volumesDeleting[key] = true
	w := o.racks[rack].w
	o.mu.Unlock()
	cctx, cancel := o.workerCtx(ctx)
	defer cancel()
	err := w.DeleteVolume(cctx, worker.VolumeRef{Team: p.Team, Name: p.Name})
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.volumesDeleting, key)
	defer o.poke()
	if err != nil {
		return err
	}
	if r := o.racks[rack]; r != nil {
		r.volumes = slices.DeleteFunc(r.volumes, func(v cosmic.StoredVolume) bool { return v.Team == p.Team && v.Name == p.Name })
		if r.volumesGone == nil {
			r.volumesGone = map[string]bool{}
		}
		r.volumesGone[key] = true
	}
	return nil
}
