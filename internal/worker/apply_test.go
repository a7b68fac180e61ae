package worker

import (
	"testing"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

func TestCheckApply(t *testing.T) {
	job := cosmic.Job{ID: "j"}
	res := func(job string, replica int, rack string, gpus ...int) cosmic.Reservation {
		return cosmic.Reservation{JobID: job, Replica: replica, Rack: rack, Nodes: []cosmic.NodeAlloc{{Node: "n0", GPUs: gpus}}}
	}
	for name, tc := range map[string]struct {
		p  ApplyParams
		ok bool
	}{
		"ok":            {ApplyParams{Job: job, Reservations: []cosmic.Reservation{res("j", 0, "r", 0), res("j", 1, "r", 1)}}, true},
		"nothing":       {ApplyParams{Job: job}, true},
		"no job id":     {ApplyParams{}, false},
		"another job":   {ApplyParams{Job: job, Reservations: []cosmic.Reservation{res("k", 0, "r", 0)}}, false},
		"another rack":  {ApplyParams{Job: job, Reservations: []cosmic.Reservation{res("j", 0, "s", 0)}}, false},
		"negative":      {ApplyParams{Job: job, Reservations: []cosmic.Reservation{res("j", -1, "r", 0)}}, false},
		"twice":         {ApplyParams{Job: job, Reservations: []cosmic.Reservation{res("j", 0, "r", 0), res("j", 0, "r", 1)}}, false},
		"holds no GPUs": {ApplyParams{Job: job, Reservations: []cosmic.Reservation{res("j", 0, "r")}}, false},
	} {
		err := CheckApply(tc.p, "r")
		if tc.ok != (err == nil) || err != nil && fabric.ErrorCode(err) != fabric.CodeBadRequest {
			t.Errorf("%s: %v, want ok=%v (else bad_request)", name, err, tc.ok)
		}
	}
}
