package qemuworker

// What the rack offers: its capacity, its catalogue, what a VM of a job gets.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/agent/agentapi"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/qemu"
	"github.com/cosmicac/cosmicac/internal/vmboot"
	"github.com/cosmicac/cosmicac/internal/worker"
)

// Capacity implements worker.Worker.
func (w *Worker) Capacity(context.Context) (worker.Capacity, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	used := map[string]int{}
	for _, r := range w.replicas {
		if holdsGPUs(r.state) {
			for _, n := range r.res.Nodes {
				used[n.Node] += len(n.GPUs)
			}
		}
	}
	c := worker.Capacity{Rack: w.cfg.Rack, ObservedAt: time.Now(), Overhead: w.overhead()}
	if w.PlacementOnly() {
		c.Note = fmt.Sprintf("real VMs under QEMU (%s); its %d × %s are declared for placement only: the VMs get no GPU", w.accel, w.cfg.Nodes*w.cfg.GPUsPerNode, w.cfg.GPUModel)
	}
	c.Catalogue = w.catalogue()
	for i := range w.cfg.Nodes {
		name := w.nodeName(i)
		c.Nodes = append(c.Nodes, cosmic.Node{Name: name, Rack: w.cfg.Rack, GPUModel: w.cfg.GPUModel, GPUs: w.cfg.GPUsPerNode,
			Schedulable: true, Ready: true, UsedGPUs: used[name], FreeGPUs: w.cfg.GPUsPerNode - used[name],
			CPUMilli: int64(w.cfg.CPUsPerNode) * 1000, MemoryMiB: int64(w.cfg.MemoryGiBPerNode) * 1024})
	}
	c.Volumes = w.volumesLocked()
	return c, nil
}

// VolumeSuffix ends the name of a standalone volume's disk, kept at
// volumesDir/TEAM/NAME.qcow2.
const VolumeSuffix = ".qcow2"

// volumesDir is where the rack keeps its standalone volumes' disks.
func (w *Worker) volumesDir() string { return filepath.Join(w.cfg.Dir, ".volumes") }

// volumesLocked are the standalone volumes the rack keeps, each with the
// job whose VM has its disk: one that runs, boots or still powers off.
func (w *Worker) volumesLocked() []cosmic.StoredVolume {
	held := w.heldVolumesLocked()
	vols, err := worker.ListVolumes(w.volumesDir(), VolumeSuffix, vmboot.StandaloneVolumeGiB<<30)
	if err != nil {
		w.log.Warn("standalone volumes not listed", "dir", w.volumesDir(), "err", err)
	}
	for i := range vols {
		vols[i].Job = held[cosmic.VolumeKey(vols[i].Team, vols[i].Name)]
	}
	return vols
}

// DeleteVolume implements worker.Worker: it removes the volume's disk,
// unless a VM has it (one that runs, boots or still powers off).
func (w *Worker) DeleteVolume(_ context.Context, p worker.VolumeRef) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	held := w.heldVolumesLocked()
	return worker.RemoveVolume(w.volumesDir(), VolumeSuffix, p, func() string { return held[cosmic.VolumeKey(p.Team, p.Name)] })
}

// heldVolumesLocked maps each standalone volume (cosmic.VolumeKey) whose
// disk a VM has to the VM's job.
func (w *Worker) heldVolumesLocked() map[string]string {
	held := map[string]string{}
	for _, r := range w.replicas {
		halting := false
		if r.halted != nil {
			select {
			case <-r.halted:
			default:
				halting = true
			}
		}
		if r.vm == nil && !halting && !holdsGPUs(r.state) {
			continue
		}
		for _, name := range r.job.Spec.StandaloneVolumes() {
			held[cosmic.VolumeKey(r.job.Team, name)] = r.key.job
		}
	}
	return held
}

// catalogue is what the rack runs: gpu-container jobs on the images of its
// catalogue, and with an engine (Options.LlamaServer) managed-inference
// jobs of the llama.cpp runtime, in VMs of at most MaxCPUs and
// MaxMemoryMiB.
func (w *Worker) catalogue() *cosmic.Catalogue {
	c := &cosmic.Catalogue{Images: w.opts.Images.Names(), JobTypes: []cosmic.JobType{cosmic.TypeGPUContainer},
		MaxVMCPUs: w.cfg.MaxCPUs, MaxVMMemoryMiB: int64(w.cfg.MaxMemoryMiB)}
	if w.opts.LlamaServer != "" {
		c.JobTypes = append(c.JobTypes, cosmic.TypeManagedInference)
		c.Runtimes = []cosmic.Runtime{cosmic.RuntimeLlamaCPP}
	}
	return c
}

// refusal says why the rack cannot run job ("": it can).
func (w *Worker) refusal(job cosmic.Job) string {
	if job.Spec.Type == cosmic.TypeManagedInference {
		in := job.Spec.Inference
		switch {
		case w.opts.LlamaServer == "":
			return fmt.Sprintf("the QEMU rack %s has no inference engine: it runs gpu-container jobs only (give it llama-server to serve llama.cpp jobs)", w.cfg.Rack)
		case in == nil || in.Runtime != cosmic.RuntimeLlamaCPP:
			return fmt.Sprintf("the QEMU rack %s serves the llama.cpp runtime only", w.cfg.Rack)
		case in.ModelSource != nil:
			return fmt.Sprintf("the QEMU rack %s serves models from its model directory only, not from a datastore (inference.modelSource: the simulated rack takes it)", w.cfg.Rack)
		}
		if _, err := os.Stat(agentapi.ModelFile(w.opts.ModelDir, in.Model)); err != nil {
			return fmt.Sprintf("the QEMU rack %s has no model %s (no %s.gguf in its model directory)", w.cfg.Rack, in.Model, in.Model)
		}
		for _, a := range in.Adapters {
			if _, err := os.Stat(agentapi.ModelFile(w.opts.ModelDir, a.Source)); err != nil {
				return fmt.Sprintf("the QEMU rack %s has no adapter %s (no %s.gguf in its model directory)", w.cfg.Rack, a.Source, a.Source)
			}
		}
		if _, err := w.inferenceImage(); err != nil {
			return err.Error()
		}
		return ""
	}
	if job.Spec.Type != cosmic.TypeGPUContainer {
		return fmt.Sprintf("the QEMU rack %s does not run %s jobs", w.cfg.Rack, job.Spec.Type)
	}
	if _, err := w.opts.Images.Lookup(job.Spec.Image); err != nil {
		return err.Error()
	}
	return ""
}

// imageOf is the base image of job's VMs: the spec's, or for a
// managed-inference job (whose spec names a model, not an image) the
// rack's inference image.
func (w *Worker) imageOf(job cosmic.Job) (string, qemu.Image, error) {
	if job.Spec.Type == cosmic.TypeManagedInference {
		name, err := w.inferenceImage()
		if err != nil {
			return "", qemu.Image{}, err
		}
		img, err := w.opts.Images.Lookup(name)
		return name, img, err
	}
	img, err := w.opts.Images.Lookup(job.Spec.Image)
	return job.Spec.Image, img, err
}

// inferenceImage is the image an inference replica's VM boots: the first of
// the catalogue's, by name (llama-server is static: any image with
// cloud-init runs it).
func (w *Worker) inferenceImage() (string, error) {
	names := w.opts.Images.Names()
	if len(names) == 0 {
		return "", fmt.Errorf("the QEMU rack %s has no image to boot an inference VM from", w.cfg.Rack)
	}
	return names[0], nil
}

// vmSize is the vCPUs and MiB of memory a replica's VM gets: the job's
// resources, capped by MaxCPUs and MaxMemoryMiB.
func (w *Worker) vmSize(job cosmic.Job) (cpus, memMiB int) {
	return clamp(job.Spec.Resources.CPU, 1, w.cfg.MaxCPUs), clamp(job.Spec.Resources.Memory*1024, 256, w.cfg.MaxMemoryMiB)
}

// given is what the rack gives a replica of job on res.
func (w *Worker) given(job cosmic.Job, res cosmic.Reservation) *cosmic.Given {
	cpus, mem := w.vmSize(job)
	g := &cosmic.Given{CPUs: cpus, MemoryMiB: int64(mem), GPUs: len(w.vfio(res))}
	var notes []string
	if cpus < job.Spec.Resources.CPU || int64(mem) < int64(job.Spec.Resources.Memory)*1024 {
		notes = append(notes, fmt.Sprintf("a VM of this rack gets at most %d vCPU and %d MiB (--qemu-max-cpus, --qemu-max-memory)", w.cfg.MaxCPUs, w.cfg.MaxMemoryMiB))
	}
	if w.PlacementOnly() && res.Count() > 0 {
		notes = append(notes, fmt.Sprintf("its %s GPUs are declared for placement only: the VM gets none", w.cfg.GPUModel))
	}
	g.Note = strings.Join(notes, "; ")
	return g
}

// overhead is a QEMU process's own memory beyond its guest's: about 64 MiB
// of its own, and under TCG the translation cache (qemu.Config's tb-size,
// 128 MiB).
func (w *Worker) overhead() cosmic.VMOverhead {
	o := cosmic.VMOverhead{MemoryMiB: 64}
	if w.accel != "kvm" {
		o.MemoryMiB += 128
	}
	return o
}

func (w *Worker) nodeName(i int) string { return fmt.Sprintf("%s-node-%d", w.cfg.Rack, i) }

// PlacementOnly says the rack's GPUs are declared, not passed through.
func (w *Worker) PlacementOnly() bool { return len(w.cfg.VFIO) == 0 }
