// Package jobflags is the one mapping between a job spec and the flags of
// `cosmicac jobs create`, both ways: Flags reads the flags given into a
// spec (the CLI), Command prints a spec as those flags (the API's POST
// /jobs/command, the CLI's --dry-run). Its round-trip test keeps the two
// one (docs/jobs.md).
//
// Importers: internal/cli, internal/appnode. It imports the domain and
// pflag.
package jobflags

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// Flags are the `jobs create` (and `jobs command`) flags: exactly the ones
// Command prints, plus the aliases --tags, --region and --no-auth. Only the
// flags given on the command line change the spec (Apply), so they override
// a spec file field by field.
type Flags struct {
	typ, name, location, region, gpuModel, image string
	labels, tags, env, sshKeys, args, adapters   []string
	gpus, disk, cpu, memory, httpPort, grpcPort  int
	timeout                                      string
	unsecureHTTP, timeoutAutoRestart             bool
	runtime, model, servedModelName, routing     string
	replicas, gpusPerReplica                     int
	requireAuth, noAuth                          bool
	minReplicas, maxReplicas, targetInFlight     int
	scaleDownDelay                               string
}

// AutoscalingFlags are the flags that set inference.autoscaling.
var AutoscalingFlags = []string{"min-replicas", "max-replicas", "target-in-flight", "scale-down-delay"}

// InferenceFlags are the flags that set the spec's inference section.
var InferenceFlags = append([]string{"runtime", "model", "served-model-name", "replicas", "gpus-per-replica", "require-auth", "no-auth", "arg", "routing", "adapter"}, AutoscalingFlags...)

// Add defines the flags on fs.
func (f *Flags) Add(fs *pflag.FlagSet) {
	fs.StringVar(&f.typ, "type", string(cosmic.TypeGPUContainer), "job type: gpu-container or managed-inference (managed-inference when an inference flag is given)")
	fs.StringVar(&f.name, "name", "", "job name")
	fs.StringArrayVar(&f.labels, "label", nil, "label `K=V` (repeatable)")
	fs.StringSliceVar(&f.tags, "tags", nil, "labels `K=V[,K=V...]` (repeatable; same as --label)")
	fs.StringVar(&f.location, "location", "", "location of the racks to run on")
	fs.StringVar(&f.region, "region", "", "alias of --location")
	fs.StringVar(&f.gpuModel, "gpu-model", "", "GPU model (empty: any of the location)")
	fs.IntVar(&f.gpus, "gpus", 0, "GPUs (for managed-inference: per replica; default 1)")
	fs.StringVar(&f.image, "image", "", "VM disk image (required for gpu-container)")
	fs.IntVar(&f.disk, "disk", 0, "root disk in `GiB` (default 100, or 200 for managed-inference)")
	fs.IntVar(&f.cpu, "cpu", 0, "vCPUs (default 8 per GPU)")
	fs.IntVar(&f.memory, "memory", 0, "memory in `GiB` (default 64 per GPU)")
	fs.StringArrayVar(&f.env, "env", nil, "environment variable `K=V` (repeatable)")
	fs.StringArrayVar(&f.sshKeys, "ssh-key", nil, "SSH public `KEY`, or @FILE of authorized_keys lines (repeatable)")
	fs.IntVar(&f.httpPort, "http-port", 0, "default HTTP port")
	fs.IntVar(&f.grpcPort, "grpc-port", 0, "gRPC port")
	fs.BoolVar(&f.unsecureHTTP, "unsecure-http", false, "the HTTP port needs no token")
	fs.StringVar(&f.timeout, "timeout", "", "kill the job after `SECONDS` (or a duration such as 2h)")
	fs.BoolVar(&f.timeoutAutoRestart, "timeout-auto-restart", false, "restart instead of kill at the timeout")
	fs.StringVar(&f.runtime, "runtime", "", "inference runtime: vllm, parakeet or llama.cpp (docs/inference.md)")
	fs.StringVar(&f.model, "model", "", "Hugging Face model ORG/NAME to serve")
	fs.StringVar(&f.servedModelName, "served-model-name", "", "the model name clients ask for (default the model)")
	fs.IntVar(&f.replicas, "replicas", 0, "inference replicas (default 1)")
	fs.IntVar(&f.gpusPerReplica, "gpus-per-replica", 0, "GPUs of one inference replica")
	fs.BoolVar(&f.requireAuth, "require-auth", true, "the inference endpoint demands an API key")
	fs.BoolVar(&f.noAuth, "no-auth", false, "same as --require-auth=false")
	fs.StringArrayVar(&f.args, "arg", nil, "vLLM argument `K=V` without the leading -- (repeatable)")
	fs.StringArrayVar(&f.adapters, "adapter", nil, "LoRA adapter `NAME=SOURCE` the replicas load, called as MODEL:NAME (repeatable; docs/inference.md)")
	fs.StringVar(&f.routing, "routing", "", "how requests pick a replica: prefix (default) or least-outstanding (docs/inference.md)")
	fs.IntVar(&f.minReplicas, "min-replicas", 0, "autoscale: the fewest replicas (0: none while idle, woken by a request; docs/inference.md)")
	fs.IntVar(&f.maxReplicas, "max-replicas", 0, "autoscale: the most replicas (turns autoscaling on)")
	fs.IntVar(&f.targetInFlight, "target-in-flight", 0, "autoscale: requests per replica to aim at (default 4)")
	fs.StringVar(&f.scaleDownDelay, "scale-down-delay", "", "autoscale: how long the load must want fewer replicas before any go, `SECONDS` or a duration such as 5m (default 300)")
}

// Apply sets onto s (a spec file's, or the zero spec) the fields of the
// flags given on fs, which Add defined; with no file, the type is
// gpu-container, or managed-inference when an inference flag is given. It
// neither defaults nor validates; its error names each bad flag.
func (f *Flags) Apply(fs *pflag.FlagSet, s *cosmic.Spec, fromFile bool) error {
	set := fs.Changed
	var errs []error
	bad := func(flag, format string, a ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, a...)))
	}
	str := func(flag string, dst *string, v string) {
		if set(flag) {
			*dst = v
		}
	}
	num := func(flag string, dst *int, v int) {
		if set(flag) {
			*dst = v
		}
	}
	// count is num for a count of which there is at least one: 0 in the
	// spec means "the default", so --gpus 0 would silently be 1.
	count := func(flag string, dst *int, v int) {
		if set(flag) && v < 1 {
			bad(flag, "%d: give at least 1", v)
			return
		}
		num(flag, dst, v)
	}

	if set("type") {
		s.Type = cosmic.JobType(f.typ)
	}
	str("name", &s.Name, f.name)
	for _, kv := range append(append([]string(nil), f.labels...), f.tags...) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			bad("label", "%q is not K=V", kv)
			continue
		}
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		s.Labels[k] = v
	}
	switch {
	case set("location") && set("region") && f.location != f.region:
		bad("region", "is an alias of --location and disagrees with it (%q != %q)", f.region, f.location)
	case set("location"):
		s.Location = f.location
	case set("region"):
		s.Location = f.region
	}
	str("gpu-model", &s.Resources.GPUModel, f.gpuModel)
	count("gpus", &s.Resources.GPU, f.gpus)
	str("image", &s.Image, f.image)
	num("disk", &s.DiskGB, f.disk)
	num("cpu", &s.Resources.CPU, f.cpu)
	num("memory", &s.Resources.Memory, f.memory)
	if set("env") {
		s.EnvVars = nil
		for _, kv := range f.env {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				bad("env", "%q is not K=V", kv)
				continue
			}
			s.EnvVars = append(s.EnvVars, cosmic.EnvVar{Name: k, Value: v})
		}
	}
	if set("ssh-key") {
		s.SSHPublicKeys = nil
		for _, k := range f.sshKeys {
			keys, err := sshKeys(k)
			if err != nil {
				bad("ssh-key", "%v", err)
			}
			s.SSHPublicKeys = append(s.SSHPublicKeys, keys...)
		}
	}
	num("http-port", &s.DefaultHTTPPort, f.httpPort)
	num("grpc-port", &s.GRPCPort, f.grpcPort)
	if set("unsecure-http") {
		s.UnsecureHTTP = f.unsecureHTTP
	}
	if set("timeout") {
		t, err := parseTimeout(f.timeout)
		if err != nil {
			bad("timeout", "%v", err)
		}
		s.Timeout = t
	}
	if set("timeout-auto-restart") {
		s.TimeoutAutoRestart = f.timeoutAutoRestart
	}

	inferenceSet := false
	for _, name := range InferenceFlags {
		inferenceSet = inferenceSet || set(name)
	}
	if inferenceSet {
		if s.Inference == nil {
			s.Inference = &cosmic.InferenceSpec{}
		}
		in := s.Inference
		if set("runtime") {
			in.Runtime = cosmic.Runtime(f.runtime)
		}
		str("model", &in.Model, f.model)
		str("served-model-name", &in.ServedModelName, f.servedModelName)
		if set("routing") {
			in.Routing = cosmic.Routing(f.routing)
		}
		if set("adapter") {
			in.Adapters = nil
			for _, kv := range f.adapters {
				name, source, ok := strings.Cut(kv, "=")
				if !ok || name == "" || source == "" {
					bad("adapter", "%q is not NAME=SOURCE", kv)
					continue
				}
				in.Adapters = append(in.Adapters, cosmic.Adapter{Name: name, Source: source})
			}
		}
		autoscale := false
		for _, name := range AutoscalingFlags {
			autoscale = autoscale || set(name)
		}
		if autoscale {
			if in.Autoscaling == nil {
				in.Autoscaling = &cosmic.Autoscaling{}
			}
			a := in.Autoscaling
			num("min-replicas", &a.MinReplicas, f.minReplicas)
			count("max-replicas", &a.MaxReplicas, f.maxReplicas)
			count("target-in-flight", &a.TargetInFlight, f.targetInFlight)
			if set("scale-down-delay") {
				d, err := parseTimeout(f.scaleDownDelay)
				if err != nil {
					bad("scale-down-delay", "%v", err)
				}
				a.ScaleDownDelay = d
			}
		}
		count("replicas", &in.Replicas, f.replicas)
		count("gpus-per-replica", &in.GPUsPerReplica, f.gpusPerReplica)
		switch {
		case set("no-auth") && set("require-auth") && f.noAuth == f.requireAuth:
			bad("no-auth", "contradicts --require-auth")
		case set("no-auth"):
			v := !f.noAuth
			in.RequireAuth = &v
		case set("require-auth"):
			v := f.requireAuth
			in.RequireAuth = &v
		}
		for _, kv := range f.args {
			k, v, ok := strings.Cut(kv, "=")
			k = strings.TrimPrefix(k, "--")
			if !ok || k == "" {
				bad("arg", "%q is not K=V", kv)
				continue
			}
			if in.Args == nil {
				in.Args = map[string]string{}
			}
			in.Args[k] = v
		}
	}
	if s.Type == "" && !fromFile {
		s.Type = cosmic.TypeGPUContainer
		if inferenceSet {
			s.Type = cosmic.TypeManagedInference
		}
	}
	return errors.Join(errs...)
}

// sshKeys reads --ssh-key: a key, or @FILE holding authorized_keys lines
// (blank lines and # comments skipped).
func sshKeys(v string) ([]string, error) {
	path, ok := strings.CutPrefix(v, "@")
	if !ok {
		return []string{v}, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var keys []string
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			keys = append(keys, line)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s holds no key", path)
	}
	return keys, nil
}

// parseTimeout reads seconds ("3600") or a Go duration ("1h") as seconds.
func parseTimeout(v string) (int, error) {
	if n, err := strconv.Atoi(v); err == nil {
		return n, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%q is not seconds or a duration such as 90m", v)
	}
	if d%time.Second != 0 {
		return 0, fmt.Errorf("%q is not whole seconds", v)
	}
	return int(d / time.Second), nil
}

// Command returns the `cosmicac jobs create` command line for spec, one
// flag per set field (zero values are left out; labels, args and env in
// order), with the command after "--". Flags:
//
//	--type --name --label K=V --location --gpu-model --gpus --image --disk
//	--cpu --memory --env K=V --ssh-key --http-port --grpc-port
//	--unsecure-http --timeout --timeout-auto-restart --runtime --model
//	--served-model-name --replicas --gpus-per-replica --require-auth=false
//	--arg K=V --routing --adapter NAME=SOURCE --min-replicas --max-replicas
//	--target-in-flight --scale-down-delay -- COMMAND...
//
// Fields without a flag (volumes, inference.modelSource, readUser, partnerId and resources other
// than gpu, gpuModel, cpu and memory) are listed in Unexpressed.
func Command(spec cosmic.Spec) cosmic.Command {
	args := []string{"cosmicac", "jobs", "create"}
	var un []string
	str := func(flag, v string) {
		if v != "" {
			args = append(args, "--"+flag, v)
		}
	}
	num := func(flag string, v int) {
		if v != 0 {
			args = append(args, "--"+flag, strconv.Itoa(v))
		}
	}
	boolean := func(flag string, v bool) {
		if v {
			args = append(args, "--"+flag)
		}
	}
	str("type", string(spec.Type))
	str("name", spec.Name)
	for _, k := range slices.Sorted(maps.Keys(spec.Labels)) {
		args = append(args, "--label", k+"="+spec.Labels[k])
	}
	str("location", spec.Location)
	r := spec.Resources
	str("gpu-model", r.GPUModel)
	if !(spec.Inference != nil && spec.Inference.GPUsPerReplica == r.GPU) {
		num("gpus", r.GPU)
	}
	str("image", spec.Image)
	num("disk", spec.DiskGB)
	num("cpu", r.CPU)
	num("memory", r.Memory)
	for _, e := range spec.EnvVars {
		args = append(args, "--env", e.Name+"="+e.Value)
	}
	for _, k := range spec.SSHPublicKeys {
		args = append(args, "--ssh-key", k)
	}
	num("http-port", spec.DefaultHTTPPort)
	num("grpc-port", spec.GRPCPort)
	boolean("unsecure-http", spec.UnsecureHTTP)
	num("timeout", spec.Timeout)
	boolean("timeout-auto-restart", spec.TimeoutAutoRestart)
	if in := spec.Inference; in != nil {
		str("runtime", string(in.Runtime))
		str("model", in.Model)
		if in.ServedModelName != in.Model {
			str("served-model-name", in.ServedModelName)
		}
		num("replicas", in.Replicas)
		num("gpus-per-replica", in.GPUsPerReplica)
		if in.RequireAuth != nil && !*in.RequireAuth {
			args = append(args, "--require-auth=false")
		}
		for _, k := range slices.Sorted(maps.Keys(in.Args)) {
			args = append(args, "--arg", k+"="+in.Args[k])
		}
		if in.Routing != cosmic.DefaultRouting {
			str("routing", string(in.Routing))
		}
		for _, a := range in.Adapters {
			args = append(args, "--adapter", a.Name+"="+a.Source)
		}
		if a := in.Autoscaling; a != nil {
			num("min-replicas", a.MinReplicas)
			num("max-replicas", a.MaxReplicas)
			if a.TargetInFlight != cosmic.DefaultTargetInFlight {
				num("target-in-flight", a.TargetInFlight)
			}
			if a.ScaleDownDelay != cosmic.DefaultScaleDownDelay {
				num("scale-down-delay", a.ScaleDownDelay)
			}
		}
	}
	for _, f := range []struct {
		path string
		set  bool
	}{
		{"resources.gpuBrand", r.GPUBrand != ""},
		{"resources.gpuMemory", r.GPUMemory != 0},
		{"resources.ephemeralStorage", r.EphemeralStorage != 0},
		{"resources.flavor", r.Flavor != ""},
		{"resources.flavorCount", r.FlavorCount != 0},
		{"resources.privateNetwork", r.PrivateNetwork != 0},
		{"resources.publicNetwork", r.PublicNetwork != 0},
		{"volumes", len(spec.Volumes) > 0},
		{"inference.modelSource", spec.Inference != nil && spec.Inference.ModelSource != nil},
		{"readUser", spec.ReadUser != ""},
		{"partnerId", spec.PartnerID != ""},
	} {
		if f.set {
			un = append(un, f.path)
		}
	}
	if len(spec.Command) > 0 {
		args = append(args, "--")
		args = append(args, spec.Command...)
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = cosmic.ShellQuote(a)
	}
	return cosmic.Command{Args: args, Line: strings.Join(quoted, " "), Unexpressed: un}
}
