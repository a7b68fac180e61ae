package appnode

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
)

// Quotas live in the ork, which admits jobs by them (docs/scheduling.md);
// the app-node checks who may read and set them.

func quotaOut(q orkapi.Quota) apiv1.Quota {
	return apiv1.Quota{Team: q.Team, Location: q.Location, GPUModel: q.GPUModel, GPUs: q.GPUs, Used: q.Used, UpdatedAt: q.UpdatedAt, UpdatedBy: q.UpdatedBy}
}

func (s *Server) quotas(r *http.Request, team string) (any, error) {
	ctx, cancel := s.orkCtx(r)
	defer cancel()
	rep, err := s.ork.ListQuotas(ctx, orkapi.ListQuotasParams{Team: team})
	if err != nil {
		return nil, err
	}
	out := apiv1.QuotaList{Items: make([]apiv1.Quota, len(rep.Quotas)), Total: len(rep.Quotas)}
	for i, q := range rep.Quotas {
		out.Items[i] = quotaOut(q)
	}
	return out, nil
}

func (s *Server) listQuotas(_ http.ResponseWriter, r *http.Request, _ *caller) (any, error) {
	return s.quotas(r, "")
}

func (s *Server) listTeamQuotas(_ http.ResponseWriter, r *http.Request, _ *caller) (any, error) {
	return s.quotas(r, r.PathValue("team"))
}

// quotaTeam is the path's team, which must exist (platform admins set
// quotas of teams they need not be in).
func (s *Server) quotaTeam(r *http.Request, c *caller) (team, location string, err error) {
	team, location = r.PathValue("team"), r.PathValue("location")
	c.auditTeam, c.auditTarget = team, location
	if _, err := s.acc.GetTeam(r.Context(), team); err != nil {
		if errors.Is(err, cosmic.ErrNotFound) {
			return "", "", teamNotFound(team)
		}
		return "", "", err
	}
	if location == "" || len(location) > cosmic.MaxLabelValueLen {
		return "", "", invalid(&cosmic.FieldError{Field: "location", Message: "is required, a location name"})
	}
	return team, location, nil
}

func (s *Server) setQuota(w http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	var in apiv1.SetQuota
	if err := s.readJSON(w, r, &in); err != nil {
		return nil, err
	}
	if in.GPUs < 0 || in.GPUs > apiv1.MaxQuotaGPUs {
		return nil, invalid(&cosmic.FieldError{Field: "gpus", Message: fmt.Sprintf("%d: want 0 to %d", in.GPUs, apiv1.MaxQuotaGPUs)})
	}
	team, location, err := s.quotaTeam(r, c)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.orkCtx(r)
	defer cancel()
	q, err := s.ork.SetQuota(ctx, orkapi.SetQuotaParams{Team: team, Location: location, GPUModel: in.GPUModel, GPUs: in.GPUs, By: c.user.Name})
	if err != nil {
		return nil, err
	}
	return quotaOut(q), nil
}

func (s *Server) deleteQuota(_ http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	team, location, err := s.quotaTeam(r, c)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.orkCtx(r)
	defer cancel()
	return nil, s.ork.DeleteQuota(ctx, orkapi.QuotaRef{Team: team, Location: location, GPUModel: r.URL.Query().Get(apiv1.QueryGPUModel)})
}

// dropQuotas removes a deleted team's quotas; a failure is logged (the
// team is gone, and a quota of no team caps nothing).
func (s *Server) dropQuotas(ctx context.Context, team string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.OrkTimeout.D())
	defer cancel()
	rep, err := s.ork.ListQuotas(ctx, orkapi.ListQuotasParams{Team: team})
	for _, q := range rep.Quotas {
		if err == nil {
			err = s.ork.DeleteQuota(ctx, orkapi.QuotaRef{Team: q.Team, Location: q.Location, GPUModel: q.GPUModel})
		}
	}
	if err != nil {
		s.log.Warn("drop quotas of a deleted team", "team", team, "err", err)
	}
}
