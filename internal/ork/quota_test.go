package ork_test

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
)

// createAs creates a gpu-container job of team asking for gpus, and lets
// the ork place it.
func (e *env) createAs(team string, gpus int) cosmic.Job {
	e.t.Helper()
	e.created++
	spec := cosmic.Spec{Type: cosmic.TypeGPUContainer, Name: fmt.Sprintf("c%d", e.created), Location: "eu", Image: "ubuntu:24.04", Resources: cosmic.Resources{GPU: gpus}}
	j, err := e.o.CreateJob(e.ctx, orkapi.CreateJobParams{ID: cosmic.NewJobID(), User: "u", Team: team, Spec: spec})
	if err != nil {
		e.t.Fatal(err)
	}
	synctest.Wait()
	return j
}

func (e *env) setQuota(team, model string, gpus int) {
	e.t.Helper()
	if _, err := e.o.SetQuota(e.ctx, orkapi.SetQuotaParams{Team: team, Location: "eu", GPUModel: model, GPUs: gpus, By: "admin"}); err != nil {
		e.t.Fatal(err)
	}
	synctest.Wait()
}

// wantQuotaWait fails unless the job is queued, held back by its team's
// quota with this message.
func (e *env) wantQuotaWait(id, msg string) {
	e.t.Helper()
	j := e.wantState(id, cosmic.StateQueued, cosmic.StateQueued)
	if j.Status.Reason == nil || j.Status.Reason.Code != cosmic.ReasonTeamQuota || j.Status.WaitingFor != msg {
		e.t.Fatalf("job %s: reason %+v, waiting for %q; want team_quota, %q", id, j.Status.Reason, j.Status.WaitingFor, msg)
	}
}

// Two teams with quotas compete for one rack with GPUs to spare: each gets
// its quota and no more; the job over quota says so with the numbers;
// raising the quota places it; the quotas list what each team uses.
func TestTeamQuotasShareARack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8, 8, 8)
		e := newEnv(t, w)
		e.setQuota("ml", "H100", 8)
		e.setQuota("web", "", 8) // all models of eu
		var ml, web []cosmic.Job
		for range 3 {
			ml = append(ml, e.createAs("ml", 4))
		}
		for range 3 {
			web = append(web, e.createAs("web", 4))
		}
		for _, j := range []cosmic.Job{ml[0], ml[1], web[0], web[1]} {
			e.wantState(j.ID, cosmic.StatePending, cosmic.StatePending)
		}
		e.wantQuotaWait(ml[2].ID, "team ml uses 8 of 8 H100 GPUs in eu; this job needs 4")
		e.wantQuotaWait(web[2].ID, "team web uses 8 of 8 GPUs in eu; this job needs 4")
		if racks := e.o.ListRacks(); racks.Racks[0].FreeGPUs != 8 {
			t.Fatalf("free GPUs %d, want 8 (the quotas hold the rest back)", racks.Racks[0].FreeGPUs)
		}
		e.heartbeats(2) // passes again change nothing
		e.wantQuotaWait(ml[2].ID, "team ml uses 8 of 8 H100 GPUs in eu; this job needs 4")

		q, err := e.o.ListQuotas(e.ctx, orkapi.ListQuotasParams{})
		if err != nil || len(q.Quotas) != 2 || q.Quotas[0].Team != "ml" || q.Quotas[0].Used != 8 || q.Quotas[1].Used != 8 || q.Quotas[0].UpdatedBy != "admin" {
			t.Fatalf("ListQuotas = %+v, %v", q, err)
		}

		e.setQuota("ml", "H100", 12)
		e.wantState(ml[2].ID, cosmic.StatePending, cosmic.StatePending)
		e.wantQuotaWait(web[2].ID, "team web uses 8 of 8 GPUs in eu; this job needs 4")

		// A job asking more than its quota could ever give waits too.
		big := e.createAs("web", 8)
		e.wantState(big.ID, cosmic.StateQueued, cosmic.StateQueued)
		if got := e.job(big.ID); got.Status.QueuePosition != 2 {
			t.Fatalf("second web job: position %d, want 2", got.Status.QueuePosition)
		}
		if err := e.o.DeleteQuota(e.ctx, orkapi.QuotaRef{Team: "web", Location: "eu"}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		e.wantState(web[2].ID, cosmic.StatePending, cosmic.StatePending)
		e.wantState(big.ID, cosmic.StateQueued, cosmic.StateQueued) // 4 GPUs left: no capacity now
		if got := e.job(big.ID); got.Status.Reason != nil || got.Status.WaitingFor != "8 × GPU in eu" {
			t.Fatalf("after the quota went: reason %+v, waiting for %q", got.Status.Reason, got.Status.WaitingFor)
		}
		e.checkBooks()

		// The quotas survive a restart, and so does what they count. A job
		// naming the model is held back before placement, one asking for
		// any model once placement has chosen H100.
		e.restart()
		if _, err := e.o.DeleteJob(e.ctx, orkapi.DeleteJobParams{ID: big.ID}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.o.KillJob(e.ctx, web[0].ID); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		anyModel := e.createAs("ml", 4)
		e.wantQuotaWait(anyModel.ID, "team ml uses 12 of 12 H100 GPUs in eu; this job needs 4")
		e.created++
		named, err := e.o.CreateJob(e.ctx, orkapi.CreateJobParams{ID: cosmic.NewJobID(), User: "u", Team: "ml", Spec: cosmic.Spec{
			Type: cosmic.TypeGPUContainer, Name: "named", Location: "eu", Image: "ubuntu:24.04", Resources: cosmic.Resources{GPU: 2, GPUModel: "H100"}}})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		e.wantQuotaWait(named.ID, "team ml uses 12 of 12 H100 GPUs in eu; this job needs 2")
		e.setQuota("ml", "H100", 16)
		e.wantState(anyModel.ID, cosmic.StatePending, cosmic.StatePending)
		e.wantQuotaWait(named.ID, "team ml uses 16 of 16 H100 GPUs in eu; this job needs 2")
		e.checkBooks()
	})
}

// A big job of one team is not starved by a stream of small ones of
// another: chosen first and not fitting, it reserves the queue, and the
// GPUs that free up wait for it.
func TestReservedHeadIsNotStarved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorker(t, "r1", 8)
		e := newEnv(t, w)
		var small []cosmic.Job
		for range 4 {
			small = append(small, e.createAs("a", 2))
		}
		big := e.createAs("b", 8)
		more := e.createAs("a", 2)
		if got := e.job(big.ID); got.Status.QueuePosition != 1 || got.Status.WaitingFor != "8 × GPU in eu" {
			t.Fatalf("big job: position %d, waiting for %q", got.Status.QueuePosition, got.Status.WaitingFor)
		}
		if got := e.job(more.ID); got.Status.QueuePosition != 2 {
			t.Fatalf("small job behind it: position %d, want 2", got.Status.QueuePosition)
		}
		for i, s := range small {
			if _, err := e.o.KillJob(e.ctx, s.ID); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			if i < len(small)-1 {
				// 2, 4, 6 GPUs free: held for the big job.
				e.wantState(more.ID, cosmic.StateQueued, cosmic.StateQueued)
				e.wantState(big.ID, cosmic.StateQueued, cosmic.StateQueued)
			}
		}
		e.wantState(big.ID, cosmic.StatePending, cosmic.StatePending)
		e.wantState(more.ID, cosmic.StateQueued, cosmic.StateQueued)
		e.checkBooks()
	})
}

// TestMaxJobsPerTeam: a team holds at most MaxJobsPerTeam jobs, in any
// state; one more is refused forbidden and stored nowhere, while another
// team still creates, and a deleted job makes room again.
func TestMaxJobsPerTeam(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnvConfig(t, func(c *ork.Config) { c.MaxJobsPerTeam = 3 }, newWorker(t, "r1", 8))
		var held []cosmic.Job
		for range 3 { // the first holds the rack's 8 GPUs; the others queue
			held = append(held, e.createAs("ml", 8))
		}
		create := func(team string) error {
			spec := cosmic.Spec{Type: cosmic.TypeGPUContainer, Location: "eu", Image: "ubuntu:24.04", Resources: cosmic.Resources{GPU: 1}}
			_, err := e.o.CreateJob(e.ctx, orkapi.CreateJobParams{ID: cosmic.NewJobID(), User: "u", Team: team, Spec: spec})
			synctest.Wait()
			return err
		}
		if err := create("ml"); cosmic.CodeOf(err) != cosmic.CodeForbidden || !strings.Contains(err.Error(), "3 jobs") {
			t.Fatalf("a fourth job of ml: %v, want forbidden naming the bound", err)
		}
		if n, _ := e.o.ListJobs(e.ctx, orkapi.ListJobsParams{Team: "ml"}); n.Total != 3 {
			t.Fatalf("ml holds %d jobs after the refusal, want 3", n.Total)
		}
		if err := create("cv"); err != nil {
			t.Fatalf("another team: %v", err)
		}
		if _, err := e.o.DeleteJob(e.ctx, orkapi.DeleteJobParams{ID: held[2].ID}); err != nil { // queued: removed at once
			t.Fatal(err)
		}
		synctest.Wait()
		e.wantGone(held[2].ID)
		if err := create("ml"); err != nil {
			t.Fatalf("ml after deleting a job: %v", err)
		}
	})
}
