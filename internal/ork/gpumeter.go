package ork

// GPU metering: what each job holds, sampled every GPUMeterEvery and
// recorded in the usage store as GPU-seconds (docs/inference.md,
// "Metering"; docs/scheduling.md).

import (
	"context"
	"strconv"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// usageRecorder is the store's usage, where the GPU-seconds go.
type usageRecorder interface {
	RecordUsage(ctx context.Context, batch string, rows []store.UsageRow) error
}

// gpuSamples are the GPU-seconds of each job holding GPUs at one sample,
// every the sample's interval: what its reservations count.
func gpuSamples(res []cosmic.Reservation, every time.Duration) map[string]int64 {
	out := map[string]int64{}
	for _, r := range res {
		out[r.JobID] += int64(r.Count()) * int64(every/time.Second)
	}
	return out
}

// meterGPUs records the GPUs the jobs hold at now as GPU-seconds of the
// sample's slot (now truncated to GPUMeterEvery): every job holding
// reservations counts their GPUs for the whole interval, so a placement or
// release is off by at most one interval. The slot names the batch, so a
// slot recorded twice (an ork after a failover, a deposed one) counts
// once; a slot no ork sampled (no leader then) is not counted.
func (o *Ork) meterGPUs(ctx context.Context, now time.Time) {
	if o.usage == nil {
		return
	}
	every := o.cfg.GPUMeterEvery.D()
	slot := now.Truncate(every)
	res, err := o.st.Reservations(ctx)
	if err != nil {
		o.log.Warn("GPU metering: reservations not read", "err", err)
		return
	}
	var rows []store.UsageRow
	for id, secs := range gpuSamples(res, every) {
		j, err := o.st.GetJob(ctx, id)
		if err != nil {
			continue // deleted since: its GPUs go with it
		}
		row := store.UsageRow{Start: slot.Truncate(time.Minute), Team: j.Team, JobID: id, GPUSeconds: secs}
		if in := j.Spec.Inference; j.Spec.Type == cosmic.TypeManagedInference && in != nil {
			row.Model = "@" + j.Team + "/" + in.ServedName()
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		return
	}
	batch := "gpu-" + strconv.FormatInt(slot.Unix(), 10) + "-" + strconv.FormatInt(int64(every/time.Second), 10)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := o.usage.RecordUsage(cctx, batch, rows); err != nil {
		o.log.Warn("GPU metering: not recorded", "batch", batch, "err", err)
	}
}
