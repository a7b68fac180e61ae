package appnode

import (
	"cmp"
	"fmt"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
)

// rackOut maps the ork's rack to the API's.
func rackOut(ri orkapi.RackInfo) apiv1.Rack {
	nodes := ri.Nodes
	if nodes == nil {
		nodes = []cosmic.Node{}
	}
	return apiv1.Rack{
		ID: ri.ID, Type: ri.Type, Location: ri.Location, GPUModel: ri.GPUModel,
		WorkerKey: ri.WorkerKey, CreatedAt: ri.CreatedAt, Nodes: nodes,
		GPUs: ri.GPUs, FreeGPUs: ri.FreeGPUs, Reachable: ri.Reachable, WorkerAddrs: ri.WorkerAddrs, Problem: ri.Problem, Note: ri.Note,
		AgentDeadline:   int(ri.Rack.AgentDeadlineOrDefault() / time.Second),
		PlacementPolicy: ri.Rack.PlacementPolicy,
		Catalogue:       ri.Catalogue,
	}
}

func (s *Server) listRacks(_ http.ResponseWriter, r *http.Request, _ *caller) (any, error) {
	ctx, cancel := s.orkCtx(r)
	defer cancel()
	rep, err := s.ork.ListRacks(ctx)
	if err != nil {
		return nil, err
	}
	out := apiv1.RackList{Items: make([]apiv1.Rack, len(rep.Racks)), Total: len(rep.Racks)}
	for i, ri := range rep.Racks {
		out.Items[i] = rackOut(ri)
	}
	return out, nil
}

// fleetOut sums the racks up by location and GPU model (a node's own
// model, else its rack's, as placement groups them), naming no rack or
// node.
func fleetOut(racks []orkapi.RackInfo) apiv1.Fleet {
	type key struct{ location, model string }
	by := map[key]*apiv1.FleetGPUModel{}
	at := func(location, model string) *apiv1.FleetGPUModel {
		k := key{location, model}
		if by[k] == nil {
			by[k] = &apiv1.FleetGPUModel{Model: model}
		}
		return by[k]
	}
	cats := map[key][]*cosmic.Catalogue{}
	for _, ri := range racks {
		at(ri.Location, ri.GPUModel) // a rack's model shows before its nodes report
		models := map[string]bool{ri.GPUModel: true}
		for _, n := range ri.Nodes {
			model := cmp.Or(n.GPUModel, ri.GPUModel)
			models[model] = true
			m := at(ri.Location, model)
			m.Nodes++
			m.GPUs += n.GPUs
			m.Free += n.FreeGPUs
			m.MaxPerNode = max(m.MaxPerNode, n.GPUs)
			m.MaxFreePerNode = max(m.MaxFreePerNode, n.FreeGPUs)
			m.MaxCPUPerNode = max(m.MaxCPUPerNode, int(n.CPUMilli/1000))
			m.MaxMemoryMiBPerNode = max(m.MaxMemoryMiBPerNode, n.MemoryMiB)
		}
		for model := range models {
			k := key{ri.Location, model}
			cats[k] = append(cats[k], ri.Catalogue)
		}
	}
	for k, cs := range cats {
		by[k].Catalogue = mergeCatalogues(cs)
	}
	locs := map[string]*apiv1.FleetLocation{}
	for k, m := range by {
		if locs[k.location] == nil {
			locs[k.location] = &apiv1.FleetLocation{Name: k.location}
		}
		locs[k.location].GPUModels = append(locs[k.location].GPUModels, *m)
	}
	out := apiv1.Fleet{Locations: []apiv1.FleetLocation{}}
	for _, l := range locs {
		slices.SortFunc(l.GPUModels, func(a, b apiv1.FleetGPUModel) int { return cmp.Compare(a.Model, b.Model) })
		out.Locations = append(out.Locations, *l)
	}
	slices.SortFunc(out.Locations, func(a, b apiv1.FleetLocation) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// mergeCatalogues is what racks run together (FleetGPUModel.Catalogue):
// nil if one reported none.
func mergeCatalogues(cs []*cosmic.Catalogue) *cosmic.Catalogue {
	out := &cosmic.Catalogue{JobTypes: []cosmic.JobType{}}
	anyImage, uncappedCPU, uncappedMem := false, false, false
	for _, c := range cs {
		if c == nil {
			return nil
		}
		for _, t := range c.JobTypes {
			if !slices.Contains(out.JobTypes, t) {
				out.JobTypes = append(out.JobTypes, t)
			}
		}
		for _, r := range c.Runtimes {
			if !slices.Contains(out.Runtimes, r) {
				out.Runtimes = append(out.Runtimes, r)
			}
		}
		anyImage = anyImage || len(c.Images) == 0
		for _, im := range c.Images {
			if !slices.Contains(out.Images, im) {
				out.Images = append(out.Images, im)
			}
		}
		uncappedCPU = uncappedCPU || c.MaxVMCPUs == 0
		uncappedMem = uncappedMem || c.MaxVMMemoryMiB == 0
		out.MaxVMCPUs = max(out.MaxVMCPUs, c.MaxVMCPUs)
		out.MaxVMMemoryMiB = max(out.MaxVMMemoryMiB, c.MaxVMMemoryMiB)
	}
	if anyImage {
		out.Images = nil
	}
	if uncappedCPU {
		out.MaxVMCPUs = 0
	}
	if uncappedMem {
		out.MaxVMMemoryMiB = 0
	}
	slices.Sort(out.JobTypes)
	slices.Sort(out.Runtimes)
	slices.Sort(out.Images)
	return out
}

// listVolumes lists the caller's team's standalone volumes, from what
// the racks last reported to the ork; another team's never appear.
func (s *Server) listVolumes(_ http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	ctx, cancel := s.orkCtx(r)
	defer cancel()
	rep, err := s.ork.ListRacks(ctx)
	if err != nil {
		return nil, err
	}
	out := apiv1.VolumeList{Items: []apiv1.Volume{}}
	for _, ri := range rep.Racks {
		for _, v := range ri.Volumes {
			if v.Team == c.team {
				out.Items = append(out.Items, apiv1.Volume{Name: v.Name, Team: v.Team, Rack: ri.ID, Bytes: v.Bytes, Size: v.Size, Job: v.Job})
			}
		}
	}
	slices.SortFunc(out.Items, func(a, b apiv1.Volume) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Rack, b.Rack)) })
	out.Total = len(out.Items)
	return out, nil
}

// deleteVolume removes a standalone volume of the caller's team from the
// rack that keeps it (the ork refuses while a job has it).
func (s *Server) deleteVolume(_ http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	name := r.PathValue("name")
	if !cosmic.ValidVolumeName(name) {
		return nil, errorf(http.StatusNotFound, apiv1.CodeNotFound, "team %s has no volume %s (see `cosmicac volumes list`)", c.team, clip(name))
	}
	c.auditTeam, c.auditTarget = c.team, name
	ctx, cancel := s.orkCtx(r)
	defer cancel()
	if err := s.ork.DeleteVolume(ctx, orkapi.VolumeRef{Team: c.team, Name: name}); err != nil {
		return nil, err
	}
	s.log.Info("standalone volume removed", "team", c.team, "volume", name, "user", c.user.Name)
	return nil, nil
}

func (s *Server) getFleet(_ http.ResponseWriter, r *http.Request, _ *caller) (any, error) {
	ctx, cancel := s.orkCtx(r)
	defer cancel()
	rep, err := s.ork.ListRacks(ctx)
	if err != nil {
		return nil, err
	}
	return fleetOut(rep.Racks), nil
}

func (s *Server) registerRack(w http.ResponseWriter, r *http.Request, _ *caller) (any, error) {
	raw, err := s.readBody(w, r)
	if err != nil {
		return nil, err
	}
	var in apiv1.RegisterRack
	if err := decodeStrict(raw, &in); err != nil {
		return nil, err
	}
	if in.Type == "" {
		in.Type = cosmic.RackTypeServer
	}
	rack := cosmic.Rack{ID: in.ID, Type: in.Type, Location: in.Location, GPUModel: in.GPUModel, WorkerKey: in.WorkerKey,
		AgentDeadline: in.AgentDeadline, PlacementPolicy: in.PlacementPolicy}
	fes := cosmic.FieldErrors(rack.Validate())
	for i, a := range in.WorkerAddrs {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			fes = append(fes, &cosmic.FieldError{Field: fmt.Sprintf("workerAddrs[%d]", i), Message: fmt.Sprintf("%q: want host:port", a)})
		}
	}
	if len(fes) > 0 {
		return nil, invalid(fes...)
	}
	ctx, cancel := s.orkCtx(r)
	defer cancel()
	ri, err := s.ork.RegisterRack(ctx, orkapi.RegisterRackParams{Rack: rack, WorkerAddrs: in.WorkerAddrs})
	if err != nil {
		return nil, err
	}
	return rackOut(ri), nil
}

func (s *Server) removeRack(_ http.ResponseWriter, r *http.Request, _ *caller) (any, error) {
	force, err := boolQuery(r, apiv1.QueryForce)
	if err != nil {
		return nil, err
	}
	id := r.PathValue("id")
	if id == "" || len(id) > 63 {
		return nil, invalid(&cosmic.FieldError{Field: "id", Message: fmt.Sprintf("%s is not a rack ID", clip(id))})
	}
	ctx, cancel := s.orkCtx(r)
	defer cancel()
	return nil, s.ork.ForgetRacks(ctx, orkapi.ForgetRacksParams{IDs: []string{id}, Force: force})
}
