package appnode

import (
	"slices"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/authz"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// withActions fills status.actions, and each replica's, of the jobs in an
// answer (a job, or a list of them): what the caller may do to each now,
// by the job's state (cosmic.Job.Actions, ReplicaActions) and the
// caller's permission in the job's team (jobs.operate). Clients, the web
// interface first, show those and restate no rule of their own.
func withActions(c *caller, body any) any {
	switch b := body.(type) {
	case cosmic.Job:
		annotateActions(c, &b)
		return b
	case apiv1.JobList:
		b.Items = slices.Clone(b.Items)
		for i := range b.Items {
			annotateActions(c, &b.Items[i])
		}
		return b
	}
	return body
}

func annotateActions(c *caller, j *cosmic.Job) {
	j.Status.Actions = nil
	j.Status.Replicas = slices.Clone(j.Status.Replicas) // the ork's answer may be shared
	for i := range j.Status.Replicas {
		j.Status.Replicas[i].Actions = nil
	}
	if c == nil || !c.can(j.Team, authz.JobsOperate) {
		return
	}
	j.Status.Actions = j.Actions()
	if j.Spec.Type != cosmic.TypeManagedInference {
		return
	}
	for i := range j.Status.Replicas {
		j.Status.Replicas[i].Actions = j.ReplicaActions(j.Status.Replicas[i].Index)
	}
}
