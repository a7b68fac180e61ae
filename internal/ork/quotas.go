package ork

import (
	"context"
	"fmt"

	"github.com/cosmicac/cosmicac/internal/ork/fairq"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/store"
)

// loadQuotasLocked gives the fair queue the quotas in the store.
func (o *Ork) loadQuotasLocked(ctx context.Context) error {
	qs, err := o.st.ListQuotas(ctx, "")
	if err != nil {
		return fmt.Errorf("load quotas: %w", err)
	}
	m := make(map[fairq.QuotaKey]int, len(qs))
	for _, q := range qs {
		m[fairq.QuotaKey{Team: q.Team, Location: q.Location, GPUModel: q.GPUModel}] = q.GPUs
	}
	o.fq.SetQuotas(m)
	return nil
}

// SetQuota sets a team's quota in a location (of one GPU model, or of all
// with GPUModel empty). Raising it places the jobs it held back; lowering
// it stops nothing that runs, it only holds back what is queued.
func (o *Ork) SetQuota(ctx context.Context, p orkapi.SetQuotaParams) (orkapi.Quota, error) {
	q := store.Quota{Team: p.Team, Location: p.Location, GPUModel: p.GPUModel, GPUs: p.GPUs,
		UpdatedAt: o.now().UTC(), UpdatedBy: p.By}
	if err := q.Validate(); err != nil {
		return orkapi.Quota{}, err
	}
	o.mu.Lock()
	if err := o.st.Update(ctx, func(tx Tx) error { return tx.PutQuota(ctx, q) }); err != nil {
		o.mu.Unlock()
		return orkapi.Quota{}, err
	}
	k := fairq.QuotaKey{Team: q.Team, Location: q.Location, GPUModel: q.GPUModel}
	o.fq.SetQuota(k, q.GPUs)
	out := wireQuota(q, o.fq.Used(k))
	o.mu.Unlock()
	o.poke()
	return out, nil
}

// DeleteQuota removes a team's quota: the team is no longer capped there.
func (o *Ork) DeleteQuota(ctx context.Context, p orkapi.QuotaRef) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.st.Update(ctx, func(tx Tx) error { return tx.DeleteQuota(ctx, p.Team, p.Location, p.GPUModel) }); err != nil {
		return err
	}
	o.fq.SetQuota(fairq.QuotaKey{Team: p.Team, Location: p.Location, GPUModel: p.GPUModel}, -1)
	o.poke()
	return nil
}

// ListQuotas lists a team's quotas (every team's with Team empty), each
// with the GPUs the team's jobs hold under it.
func (o *Ork) ListQuotas(ctx context.Context, p orkapi.ListQuotasParams) (orkapi.ListQuotasReply, error) {
	qs, err := o.st.ListQuotas(ctx, p.Team)
	if err != nil {
		return orkapi.ListQuotasReply{}, err
	}
	out := orkapi.ListQuotasReply{Quotas: make([]orkapi.Quota, 0, len(qs))}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, q := range qs {
		out.Quotas = append(out.Quotas, wireQuota(q, o.fq.Used(fairq.QuotaKey{Team: q.Team, Location: q.Location, GPUModel: q.GPUModel})))
	}
	return out, nil
}

func wireQuota(q store.Quota, used int) orkapi.Quota {
	return orkapi.Quota{Team: q.Team, Location: q.Location, GPUModel: q.GPUModel, GPUs: q.GPUs,
		UpdatedAt: q.UpdatedAt, UpdatedBy: q.UpdatedBy, Used: used}
}
