package cosmic

import (
	"strconv"
	"strings"
)

// FileCommand is the command that creates a job from a full spec file; a
// caller suggests it when CLICommand reports fields that have no flag.
const FileCommand = "cosmicac jobs create -f spec.yaml"

// Command is the `cosmicac jobs create` invocation equivalent to a spec.
type Command struct {
	// Args is the argument vector, starting with "cosmicac".
	Args []string `json:"args"`
	// Line is Args quoted for a POSIX shell.
	Line string `json:"command"`
	// Unexpressed lists the JSON paths of set fields that no flag
	// expresses. When it is not empty Line creates a different job than the
	// spec: save the spec to a file and use FileCommand instead.
	Unexpressed []string `json:"unexpressed,omitempty"`
}

// CLICommand returns the `cosmicac jobs create` command line for spec, one
// flag per set field (zero values are left out; labels, args and env in
// order), with the command after "--". Flags:
//
//	--type --name --label K=V --location --gpu-model --gpus --image --disk
//	--cpu --memory --env K=V --ssh-key --http-port --grpc-port
//	--unsecure-http --timeout --timeout-auto-restart --runtime --model
//	--served-model-name --replicas --gpus-per-replica --require-auth=false
//	--arg K=V -- COMMAND...
//
// Fields without a flag (volumes, readUser, partnerId and resources other
// than gpu, gpuModel, cpu and memory) are listed in Unexpressed.
func CLICommand(spec Spec) Command {
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
	for _, k := range sortedKeys(spec.Labels) {
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
		for _, k := range sortedKeys(in.Args) {
			args = append(args, "--arg", k+"="+in.Args[k])
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
		quoted[i] = ShellQuote(a)
	}
	return Command{Args: args, Line: strings.Join(quoted, " "), Unexpressed: un}
}

// ShellQuote quotes s for a POSIX shell: as is when it holds only safe
// characters, else in single quotes, each ' written as the sequence quote,
// backslash, quote, quote.
func ShellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_@%+=:,./-", c)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
