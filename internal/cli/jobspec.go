package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/cosmicac/cosmicac/internal/apiv1"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// specFlags are the `jobs create` (and `jobs command`) flags: exactly the
// ones cosmic.CLICommand prints (docs/jobs.md), plus the aliases --tags,
// --region, --no-auth, and -f FILE. Only flags given on the command line
// change the spec, so they override a -f file field by field.
type specFlags struct {
	file string

	typ, name, location, region, gpuModel, image string
	labels, tags, env, sshKeys, args             []string
	gpus, disk, cpu, memory, httpPort, grpcPort  int
	timeout                                      string
	unsecureHTTP, timeoutAutoRestart             bool
	runtime, model, servedModelName              string
	replicas, gpusPerReplica                     int
	requireAuth, noAuth                          bool
}

// inferenceFlags are the flags that set the spec's inference section.
var inferenceFlags = []string{"runtime", "model", "served-model-name", "replicas", "gpus-per-replica", "require-auth", "no-auth", "arg"}

func (f *specFlags) add(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVarP(&f.file, "file", "f", "", "a full job spec, YAML or JSON ('-' reads stdin); flags override its fields")
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
	fs.StringVar(&f.runtime, "runtime", "", "inference runtime: vllm or parakeet")
	fs.StringVar(&f.model, "model", "", "Hugging Face model ORG/NAME to serve")
	fs.StringVar(&f.servedModelName, "served-model-name", "", "the model name clients ask for (default the model)")
	fs.IntVar(&f.replicas, "replicas", 0, "inference replicas (default 1)")
	fs.IntVar(&f.gpusPerReplica, "gpus-per-replica", 0, "GPUs of one inference replica")
	fs.BoolVar(&f.requireAuth, "require-auth", true, "the inference endpoint demands an API key")
	fs.BoolVar(&f.noAuth, "no-auth", false, "same as --require-auth=false")
	fs.StringArrayVar(&f.args, "arg", nil, "vLLM argument `K=V` without the leading -- (repeatable)")
	_ = cmd.RegisterFlagCompletionFunc("type", cobra.FixedCompletions([]string{string(cosmic.TypeGPUContainer), string(cosmic.TypeManagedInference)}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("runtime", cobra.FixedCompletions([]string{string(cosmic.RuntimeVLLM), string(cosmic.RuntimeParakeet)}, cobra.ShellCompDirectiveNoFileComp))
}

// spec builds the spec from -f FILE (if any), then the flags given, then
// the command after "--". It neither defaults nor validates. Its errors are
// usage errors (exit 2).
func (f *specFlags) spec(cmd *cobra.Command, args []string, stdin io.Reader) (cosmic.Spec, error) {
	var s cosmic.Spec
	dash := cmd.ArgsLenAtDash()
	if dash < 0 && len(args) > 0 || dash > 0 {
		return s, usageErrorf("unexpected argument %q: put the job's command after --, as in: cosmicac jobs create ... -- python train.py", args[0])
	}
	if f.file != "" {
		var err error
		if s, err = readSpecFile(f.file, stdin); err != nil {
			return s, withExit(ExitUsage, err)
		}
	}
	fs := cmd.Flags()
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
	for _, name := range inferenceFlags {
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
	if s.Type == "" && f.file == "" {
		s.Type = cosmic.TypeGPUContainer
		if inferenceSet {
			s.Type = cosmic.TypeManagedInference
		}
	}
	if dash >= 0 {
		s.Command = append([]string(nil), args[dash:]...)
	}
	if len(errs) > 0 {
		return s, withExit(ExitUsage, errors.Join(errs...))
	}
	return s, nil
}

// readSpecFile reads a spec from a YAML or JSON file ("-" is stdin),
// strictly: unknown fields are errors.
func readSpecFile(path string, stdin io.Reader) (cosmic.Spec, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(stdin)
		path = "stdin"
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return cosmic.Spec{}, fmt.Errorf("read spec: %w", err)
	}
	js := data
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '{' {
		if js, err = yaml.YAMLToJSON(data); err != nil {
			return cosmic.Spec{}, fmt.Errorf("read spec %s: %w", path, err)
		}
	}
	if spec, ok, err := jobDocumentSpec(js); err != nil {
		return cosmic.Spec{}, fmt.Errorf("read spec %s: %w", path, err)
	} else if ok {
		js = spec
	}
	s, err := cosmic.ParseSpec(js)
	if err != nil {
		return s, fmt.Errorf("read spec %s: %w", path, err)
	}
	return s, nil
}

// jobDocumentSpec takes the spec out of a whole job as `jobs get -o
// json|yaml` prints it (a document with a "spec" object), so that output
// can be created again, as kubectl creates from its own output: the job's
// ID, status and times are the platform's and are left out. A document
// without "spec" is a spec itself (ok false). A job document is read as
// strictly as a spec: a field a job does not have is refused.
func jobDocumentSpec(js []byte) (spec json.RawMessage, ok bool, err error) {
	var top map[string]json.RawMessage
	if json.Unmarshal(js, &top) != nil {
		return nil, false, nil // not an object: ParseSpec says why
	}
	raw, ok := top["spec"]
	if !ok {
		return nil, false, nil
	}
	var job struct {
		apiv1.Job
		Spec json.RawMessage `json:"spec"`
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&job); err != nil {
		return nil, false, fmt.Errorf("a job document (it has \"spec\"): %w", err)
	}
	return raw, true, nil
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

// validateSpec defaults a copy of s and validates it, reporting every
// problem on one line each (exit 2).
func validateSpec(s cosmic.Spec) (cosmic.Spec, error) {
	s.Default()
	if err := s.Validate(); err != nil {
		return s, withExit(ExitUsage, fieldProblems("invalid job spec", cosmic.FieldErrors(err), err))
	}
	return s, nil
}

// fieldProblems formats field errors as a headline and one indented line
// each; with none it falls back to err.
func fieldProblems(headline string, fes []*cosmic.FieldError, err error) error {
	if len(fes) == 0 {
		return fmt.Errorf("%s: %w", headline, err)
	}
	var b strings.Builder
	b.WriteString(headline + ":")
	for _, fe := range fes {
		b.WriteString("\n  " + fe.Error())
	}
	return errors.New(b.String())
}
