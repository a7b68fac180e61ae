package cosmic

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits enforced by Validate.
const (
	MaxGPUs          = 1024 // per replica and per job
	MaxReplicas      = 128
	MaxNameLen       = 64
	MaxLabels        = 64
	MaxEnvVars       = 256
	MaxSSHKeys       = 32
	MaxVolumes       = 32
	MaxAdapters      = 16
	MaxCommandBytes  = 64 << 10
	MaxDiskGB        = 64 << 10
	MaxCPU           = 4096
	MaxMemoryGB      = 64 << 10
	ReservedLabelPre = "cosmicac/" // label keys under this prefix belong to the platform
	ReservedEnvPre   = "COSMICAC_" // environment names under this prefix belong to the platform
)

// The longest label key (a 253-byte DNS prefix, '/', a 63-byte name) and
// value that ValidLabelKey and ValidLabelValue accept.
const (
	MaxLabelKeyLen   = 253 + 1 + 63
	MaxLabelValueLen = 63
)

var (
	labelNameRe   = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
	dnsSubdomRe   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	envNameRe     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	identRe       = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	hfModelRe     = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?(/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`)
	hex64Re       = regexp.MustCompile(`^[0-9a-f]{64}$`)
	parserNameRe  = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	revisionRe    = regexp.MustCompile(`^[A-Za-z0-9][-A-Za-z0-9_./]{0,127}$`)
	servedNameRe  = regexp.MustCompile(`^[A-Za-z0-9][-A-Za-z0-9_.:/]*$`)
	sshKeyTypes   = []string{"ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com"}
	dtypes        = []string{"auto", "half", "float16", "bfloat16", "float", "float32"}
	quantizations = []string{"awq", "awq_marlin", "gptq", "gptq_marlin", "fp8", "bitsandbytes", "compressed-tensors", "experts_int8", "modelopt", "mxfp4"}
	kvCacheDtypes = []string{"auto", "fp8", "fp8_e4m3", "fp8_e5m2"}
)

// MaxServedModelName bounds a served model name.
const MaxServedModelName = 256

// ValidServedModelName reports whether s may be a served model name: 1 to
// MaxServedModelName letters, digits, '-', '_', '.', ':' and '/', starting
// with a letter or a digit. Every Hugging Face model id is one. The set is
// small on purpose: a name is pasted into shell, Python and JavaScript
// snippets and URLs, and no character of it is special in any of them; and
// since it never starts with '@', a name can never read as another team's
// open model, which is called "@TEAM/NAME" (docs/inference.md).
func ValidServedModelName(s string) bool {
	return len(s) <= MaxServedModelName && servedNameRe.MatchString(s)
}

// ValidLocation reports whether s is shaped like a location name
// (1–63 letters, digits, '-', '_' or '.', starting and ending alphanumeric).
func ValidLocation(s string) bool { return len(s) <= 63 && identRe.MatchString(s) }

// ValidVolumeName says whether s may name a standalone volume.
func ValidVolumeName(s string) bool { return len(s) <= 63 && identRe.MatchString(s) }

// ValidGPUModel reports whether s is shaped like a GPU model name such as
// GH100_H100_SXM5_80GB (1–128 letters, digits, '-', '_' or '.').
func ValidGPUModel(s string) bool { return len(s) <= 128 && identRe.MatchString(s) }

// ValidWorkerKey reports whether s is a worker public key: 64 lowercase hex digits.
func ValidWorkerKey(s string) bool { return hex64Re.MatchString(s) }

// ValidLabelKey reports whether k is a Kubernetes-shaped label key:
// an optional DNS-subdomain prefix and '/', then a name of at most 63
// characters. It does not check the reserved prefix.
func ValidLabelKey(k string) bool {
	name := k
	if i := strings.LastIndexByte(k, '/'); i >= 0 {
		prefix := k[:i]
		name = k[i+1:]
		if prefix == "" || len(prefix) > 253 || !dnsSubdomRe.MatchString(prefix) {
			return false
		}
	}
	return len(name) <= 63 && labelNameRe.MatchString(name)
}

// ValidLabelValue reports whether v is a Kubernetes-shaped label value:
// empty, or at most 63 characters shaped like a label name.
func ValidLabelValue(v string) bool { return v == "" || (len(v) <= 63 && labelNameRe.MatchString(v)) }

// ValidateLabel checks one user label (key and value) and refuses the
// reserved prefix. The API's label endpoint uses it; field is the JSON path
// to report.
func ValidateLabel(field, key, value string) error {
	var p problems
	checkLabel(&p, field, key, value)
	return p.err()
}

func checkLabel(p *problems, field, k, v string) {
	switch {
	case !ValidLabelKey(k):
		p.add(field, "key %q is not a valid label key (an optional DNS prefix and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric)", k)
	case strings.HasPrefix(k, ReservedLabelPre):
		p.add(field, "key %q uses the reserved prefix %q", k, ReservedLabelPre)
	}
	if !ValidLabelValue(v) {
		p.add(field, "value %q is not a valid label value (at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric)", v)
	}
}

// Validate reports every problem of a spec at once (with a missing or
// unknown type, none that depends on the type), as errors.Join of
// *FieldError (see FieldErrors); each is also an ErrInvalid. It checks the
// spec's shape only: whether its location and GPU model exist is the ork's
// business (reasons no_such_location, no_such_gpu_model). Call Default first:
// Validate checks the defaulted form (resources.gpu 0 is refused).
func (s Spec) Validate() error {
	var p problems
	switch {
	case s.Type == "":
		p.add("type", "is required (%s or %s)", TypeGPUContainer, TypeManagedInference)
	case !s.Type.Valid():
		p.add("type", "unknown job type %q (want %s or %s)", s.Type, TypeGPUContainer, TypeManagedInference)
	}
	// What a spec needs beyond its shape (an image, a disk and a GPU by
	// default, an inference section or none) depends on its type: without a
	// known one, those would be side errors of the type's (`--type managed`
	// is not told "inference: is only for managed-inference jobs"), so only
	// the problems any type would have are told with the type's.
	typed := s.Type.Valid()
	least := func(lo int) int {
		if typed {
			return lo
		}
		return 0
	}
	if utf8.RuneCountInString(s.Name) > MaxNameLen {
		p.add("name", "is longer than %d characters", MaxNameLen)
	}
	if !printable(s.Name) {
		p.add("name", "holds control characters")
	}
	if len(s.Labels) > MaxLabels {
		p.add("labels", "has %d labels, more than %d", len(s.Labels), MaxLabels)
	}
	for _, k := range sortedKeys(s.Labels) {
		checkLabel(&p, "labels."+k, k, s.Labels[k])
	}
	switch {
	case s.Location == "":
		p.add("location", "is required")
	case !ValidLocation(s.Location):
		p.add("location", "%q is not a valid location name", s.Location)
	}
	switch {
	case s.Image == "" && s.Type == TypeGPUContainer:
		p.add("image", "is required for a %s job", TypeGPUContainer)
	case s.Image != "" && (len(s.Image) > 512 || strings.ContainsFunc(s.Image, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) })):
		p.add("image", "%q is not an image reference", s.Image)
	}
	checkRange(&p, "diskGB", s.DiskGB, least(1), MaxDiskGB)
	checkCommand(&p, s)
	checkEnv(&p, s.EnvVars)
	checkResources(&p, s, least(1))
	checkSSHKeys(&p, s.SSHPublicKeys)
	checkPort(&p, "defaultHttpPort", s.DefaultHTTPPort)
	checkPort(&p, "grpcPort", s.GRPCPort)
	if s.GRPCPort != 0 && s.GRPCPort == s.DefaultHTTPPort {
		p.add("grpcPort", "must differ from defaultHttpPort")
	}
	if s.Timeout < 0 {
		p.add("timeout", "must not be negative")
	}
	if s.TimeoutAutoRestart && s.Timeout == 0 {
		p.add("timeoutAutoRestart", "needs a timeout")
	}
	checkVolumes(&p, s.Volumes)
	if s.Type == TypeManagedInference {
		for i, v := range s.Volumes {
			if v.Source.Standalone != nil {
				p.add(fmt.Sprintf("volumes[%d].volumeSource.standalone", i), "a standalone volume is one disk, mounted by one VM: a %s job's, not a model's replicas", TypeGPUContainer)
			}
		}
	}
	if len(s.ReadUser) > 128 || !printable(s.ReadUser) {
		p.add("readUser", "must be at most 128 printable characters")
	}
	if len(s.PartnerID) > 128 || !printable(s.PartnerID) {
		p.add("partnerId", "must be at most 128 printable characters")
	}
	switch {
	case !typed:
	case s.Type == TypeManagedInference && s.Inference == nil:
		p.add("inference", "is required for a %s job", TypeManagedInference)
	case s.Type != TypeManagedInference && s.Inference != nil:
		p.add("inference", "is only for %s jobs", TypeManagedInference)
	case s.Inference != nil:
		checkInference(&p, s)
	}
	return p.err()
}

func checkRange(p *problems, field string, v, lo, hi int) {
	switch {
	case v < 0:
		p.add(field, "must not be negative")
	case v < lo:
		p.add(field, "must be at least %d", lo)
	case v > hi:
		p.add(field, "must be at most %d", hi)
	}
}

func checkPort(p *problems, field string, v int) {
	if v != 0 && (v < 1 || v > 65535) {
		p.add(field, "must be a port between 1 and 65535")
	}
}

func checkCommand(p *problems, s Spec) {
	if len(s.Command) > 0 && s.Type == TypeManagedInference {
		p.add("command", "is not used by %s jobs; set inference.args instead", TypeManagedInference)
	}
	n := 0
	for i, a := range s.Command {
		n += len(a)
		if strings.IndexByte(a, 0) >= 0 || !utf8.ValidString(a) {
			p.add(fmt.Sprintf("command[%d]", i), "holds a NUL byte or invalid UTF-8")
		}
	}
	if n > MaxCommandBytes {
		p.add("command", "is longer than %d bytes", MaxCommandBytes)
	}
}

func checkEnv(p *problems, env []EnvVar) {
	if len(env) > MaxEnvVars {
		p.add("envVars", "has %d variables, more than %d", len(env), MaxEnvVars)
	}
	seen := map[string]bool{}
	for i, e := range env {
		f := fmt.Sprintf("envVars[%d]", i)
		switch {
		case !envNameRe.MatchString(e.Name):
			p.add(f+".name", "%q is not a variable name (letters, digits and '_', not starting with a digit)", e.Name)
		case strings.HasPrefix(strings.ToUpper(e.Name), ReservedEnvPre):
			p.add(f+".name", "%q uses the reserved prefix %s", e.Name, ReservedEnvPre)
		case seen[e.Name]:
			p.add(f+".name", "%q is set twice", e.Name)
		}
		seen[e.Name] = true
		if strings.IndexByte(e.Value, 0) >= 0 || !utf8.ValidString(e.Value) {
			p.add(f+".value", "holds a NUL byte or invalid UTF-8")
		}
	}
}

// checkResources checks s.Resources, resources.gpu from leastGPUs.
func checkResources(p *problems, s Spec, leastGPUs int) {
	r := s.Resources
	checkRange(p, "resources.gpu", r.GPU, leastGPUs, MaxGPUs)
	if r.GPUModel != "" && !ValidGPUModel(r.GPUModel) {
		p.add("resources.gpuModel", "%q is not a valid GPU model name", r.GPUModel)
	}
	if r.GPUBrand != "" && !strings.EqualFold(r.GPUBrand, "nvidia") {
		p.add("resources.gpuBrand", "%q is not supported (only nvidia)", r.GPUBrand)
	}
	checkRange(p, "resources.gpuMemory", r.GPUMemory, 0, 1<<20)
	checkRange(p, "resources.cpu", r.CPU, 0, MaxCPU)
	checkRange(p, "resources.memory", r.Memory, 0, MaxMemoryGB)
	checkRange(p, "resources.ephemeralStorage", r.EphemeralStorage, 0, MaxDiskGB)
	checkRange(p, "resources.flavorCount", r.FlavorCount, 0, MaxGPUs)
	checkRange(p, "resources.privateNetwork", r.PrivateNetwork, 0, 1<<30)
	checkRange(p, "resources.publicNetwork", r.PublicNetwork, 0, 1<<30)
	if len(r.Flavor) > 64 || (r.Flavor != "" && !identRe.MatchString(r.Flavor)) {
		p.add("resources.flavor", "%q is not a valid flavor name", r.Flavor)
	}
}

func checkSSHKeys(p *problems, keys []string) {
	if len(keys) > MaxSSHKeys {
		p.add("sshPublicKeys", "has %d keys, more than %d", len(keys), MaxSSHKeys)
	}
	for i, k := range keys {
		if msg := sshKeyProblem(k); msg != "" {
			p.add(fmt.Sprintf("sshPublicKeys[%d]", i), "%s", msg)
		}
	}
}

// sshKeyProblem checks an authorized_keys line "TYPE BASE64 [comment]": a
// known type and a blob whose embedded type agrees with it.
func sshKeyProblem(k string) string {
	fields := strings.Fields(k)
	if len(fields) < 2 {
		return "is not a public key (want \"ssh-ed25519 AAAA... comment\")"
	}
	typ := fields[0]
	if !slices.Contains(sshKeyTypes, typ) {
		return fmt.Sprintf("key type %q is not supported (want one of %s)", typ, strings.Join(sshKeyTypes, ", "))
	}
	blob, err := base64.StdEncoding.DecodeString(fields[1])
	if err != nil || len(blob) < 4 {
		return "key data is not base64"
	}
	n := binary.BigEndian.Uint32(blob)
	if uint64(n) > uint64(len(blob)-4) || string(blob[4:4+n]) != typ {
		return fmt.Sprintf("key data does not hold a %s key", typ)
	}
	if strings.ContainsAny(k, "\r\n") {
		return "holds a line break"
	}
	return ""
}

// Volume archives: the formats a datastore source's data may be kept in.
var volumeArchives = []string{"zip", "tar", "tar.gz", "tar.bz2"}

func checkVolumes(p *problems, vols []Volume) {
	if len(vols) > MaxVolumes {
		p.add("volumes", "has %d volumes, more than %d", len(vols), MaxVolumes)
	}
	paths := map[string]int{}
	names := map[string]bool{}
	standalone := map[string]bool{}
	for i, v := range vols {
		f := fmt.Sprintf("volumes[%d]", i)
		if v.Name != "" {
			if len(v.Name) > 63 || !identRe.MatchString(v.Name) {
				p.add(f+".name", "%q is not a valid volume name", v.Name)
			} else if names[v.Name] {
				p.add(f+".name", "%q is used twice", v.Name)
			}
			names[v.Name] = true
		}
		switch {
		case !strings.HasPrefix(v.MountPath, "/"):
			p.add(f+".mountPath", "must be an absolute path")
		case path.Clean(v.MountPath) != v.MountPath || v.MountPath == "/" || !printable(v.MountPath):
			p.add(f+".mountPath", "%q must be a clean path below / (no .., no trailing /)", v.MountPath)
		default:
			for other, j := range paths {
				switch {
				case other == v.MountPath:
					p.add(f+".mountPath", "%q is volumes[%d]'s mount path too: one volume a path", v.MountPath, j)
				case strings.HasPrefix(v.MountPath, other+"/"), strings.HasPrefix(other, v.MountPath+"/"):
					p.add(f+".mountPath", "%q and volumes[%d]'s %q are one inside the other: mount them apart", v.MountPath, j, other)
				}
			}
			paths[v.MountPath] = i
		}
		perm := strings.ToUpper(v.Permission)
		switch perm {
		case "", PermissionRO, PermissionRW, PermissionRWD:
		default:
			p.add(f+".permission", "%q is not RO, RW or RWD", v.Permission)
		}
		src := v.Source
		n := 0
		if d := src.DataStore; d != nil {
			n++
			checkDataStoreSource(p, f+".volumeSource.dataStore", d)
			switch {
			case d.Archive == "":
			case d.Prefix == "":
				p.add(f+".volumeSource.dataStore.prefix", "is the archive's object key: required with archive")
			case perm == PermissionRWD:
				p.add(f+".permission", "an archive is replaced whole when pushed: RW, not RWD")
			case perm == PermissionRW && d.Archive == "tar.bz2" && v.Target == nil:
				p.add(f+".volumeSource.dataStore.archive", "tar.bz2 is read only here (no bzip2 writer): RO, or push to a volumeTarget in another format")
			}
		}
		if g := src.PublicGit; g != nil {
			n++
			rest, ok := strings.CutPrefix(g.URL, "https://")
			if !ok {
				rest, ok = strings.CutPrefix(g.URL, "http://")
			}
			host, _, _ := strings.Cut(rest, "/")
			if !ok || host == "" || strings.Contains(host, "@") || strings.ContainsAny(g.URL, "?#") ||
				strings.ContainsFunc(g.URL, unicode.IsSpace) || len(g.URL) > 2048 {
				p.add(f+".volumeSource.publicGit.url", "must be an http(s):// URL of a public repository, with no user, password or query")
			}
			if perm == PermissionRW || perm == PermissionRWD {
				p.add(f+".permission", "a Git repository is cloned, never pushed: RO")
			}
		}
		if st := src.Standalone; st != nil {
			n++
			switch {
			case !identRe.MatchString(st.Name) || len(st.Name) > 63:
				p.add(f+".volumeSource.standalone.name", "%q is not a valid volume name", st.Name)
			case standalone[st.Name]:
				p.add(f+".volumeSource.standalone.name", "%q is mounted twice: a standalone volume has one mount path", st.Name)
			}
			standalone[st.Name] = true
			if perm == PermissionRWD {
				p.add(f+".permission", "RWD deletes on a datastore what the job deleted: a standalone volume is RW or RO")
			}
			if v.Cache {
				p.add(f+".cache", "a standalone volume is kept on its own: cache is for a datastore's or a repository's data")
			}
		}
		if n != 1 {
			p.add(f+".volumeSource", "must set exactly one of dataStore, publicGit, standalone")
		}
		if v.Target != nil {
			switch {
			case v.Target.TargetDataStore == nil:
				p.add(f+".volumeTarget", "must set targetDataStore")
			case perm != PermissionRW:
				p.add(f+".volumeTarget", "is where an RW volume is pushed: give permission RW (RWD deletes what the job deleted from its source, which a volume pushed elsewhere does not write)")
			default:
				t := v.Target.TargetDataStore
				checkDataStoreSource(p, f+".volumeTarget.targetDataStore", t)
				switch {
				case t.Archive == "tar.bz2":
					p.add(f+".volumeTarget.targetDataStore.archive", "tar.bz2 is read only here (no bzip2 writer): zip, tar or tar.gz")
				case t.Archive != "" && t.Prefix == "":
					p.add(f+".volumeTarget.targetDataStore.prefix", "is the archive's object key: required with archive")
				}
			}
		}
	}
}

// checkDataStoreSource checks a datastore source named f: the alias a
// datastore's name, the container an S3 bucket's name, the prefix a clean
// relative path, the archive a known format. Whether the alias is one of
// the team's is the app-node's to say.
func checkDataStoreSource(p *problems, f string, d *DataStoreSource) {
	if d.Alias == "" {
		p.add(f+".alias", "is required: a datastore of the team (cosmicac datastores list)")
	} else if !ValidAccountName(d.Alias) {
		p.add(f+".alias", "%q is not a datastore alias", d.Alias)
	}
	if d.Container == "" {
		p.add(f+".container", "is required")
	} else if !validBucket(d.Container) {
		p.add(f+".container", "%q is not a bucket name: 3 to 63 lowercase letters, digits, '.' and '-', starting and ending with a letter or digit", d.Container)
	}
	if pr := d.Prefix; pr != "" {
		if strings.HasPrefix(pr, "/") || len(pr) > 1024 || !printable(pr) || slices.Contains(strings.Split(pr, "/"), "..") || strings.Contains(pr, "//") {
			p.add(f+".prefix", "%q must be a relative key prefix: no leading /, no .., no //", pr)
		}
	}
	if d.Archive != "" && !slices.Contains(volumeArchives, d.Archive) {
		p.add(f+".archive", "%q is not one of %s", d.Archive, strings.Join(volumeArchives, ", "))
	}
}

// validBucket reports whether s is an S3 bucket name (AWS's rules for
// general purpose buckets, which S3-compatible servers follow).
func validBucket(s string) bool {
	if len(s) < 3 || len(s) > 63 || strings.Contains(s, "..") {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (c != '.' && c != '-' || i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}

func checkInference(p *problems, s Spec) {
	in := s.Inference
	switch in.Runtime {
	case RuntimeVLLM, RuntimeParakeet, RuntimeLlamaCPP:
	case "":
		p.add("inference.runtime", "is required (%s)", joinOr(Runtimes))
	default:
		p.add("inference.runtime", "unknown runtime %q (want %s)", in.Runtime, joinOr(Runtimes))
	}
	switch {
	case in.Model == "":
		p.add("inference.model", "is required")
	case in.Runtime == RuntimeLlamaCPP && (len(in.Model) > 256 || !hfModelRe.MatchString(in.Model)):
		p.add("inference.model", "%q is not a model of the node's model directory (want NAME or ORG/NAME: the file ORG/NAME.gguf there; docs/inference.md)", in.Model)
	case len(in.Model) > 256 || !hfModelRe.MatchString(in.Model):
		p.add("inference.model", "%q is not a model name (want ORG/NAME as on Hugging Face)", in.Model)
	case in.Runtime == RuntimeParakeet && in.Model != ParakeetModel:
		p.add("inference.model", "the parakeet runtime serves only %s", ParakeetModel)
	}
	if in.ServedModelName != "" && !ValidServedModelName(in.ServedModelName) {
		p.add("inference.servedModelName", "%q is not a served model name: at most %d letters, digits, '-', '_', '.', ':' and '/', starting with a letter or a digit", in.ServedModelName, MaxServedModelName)
	}
	checkAdapters(p, in)
	if src := in.ModelSource; src != nil {
		checkDataStoreSource(p, "inference.modelSource", src)
		switch {
		case in.Runtime == RuntimeParakeet:
			p.add("inference.modelSource", "the parakeet runtime's model comes from NGC, not a datastore")
		case src.Archive != "":
			p.add("inference.modelSource.archive", "a model's objects are taken as they are: no archive")
		case src.Prefix == "":
			p.add("inference.modelSource.prefix", "is required: the prefix of the model's objects (for llama.cpp, one GGUF file)")
		}
	}
	if in.Routing != "" && !slices.Contains(Routings, in.Routing) {
		p.add("inference.routing", "unknown routing %q (want %s)", in.Routing, joinOr(Routings))
	}
	checkRange(p, "inference.replicas", in.Replicas, 1, MaxReplicas)
	checkAutoscaling(p, in)
	checkRange(p, "inference.gpusPerReplica", in.GPUsPerReplica, 1, MaxGPUs)
	if in.GPUsPerReplica > 0 && s.Resources.GPU > 0 && in.GPUsPerReplica != s.Resources.GPU {
		p.add("resources.gpu", "is the GPU count of one replica and must equal inference.gpusPerReplica (%d != %d)", s.Resources.GPU, in.GPUsPerReplica)
	}
	if in.Replicas > 0 && in.GPUsPerReplica > 0 && in.Replicas*in.GPUsPerReplica > MaxGPUs {
		p.add("inference.replicas", "replicas × gpusPerReplica is %d GPUs, more than %d", in.Replicas*in.GPUsPerReplica, MaxGPUs)
	}
	if a := in.Autoscaling; a != nil && a.MaxReplicas > 0 && in.GPUsPerReplica > 0 && a.MaxReplicas*in.GPUsPerReplica > MaxGPUs {
		p.add("inference.autoscaling.maxReplicas", "maxReplicas × gpusPerReplica is %d GPUs, more than %d", a.MaxReplicas*in.GPUsPerReplica, MaxGPUs)
	}
	if in.Runtime == RuntimeParakeet {
		if in.GPUsPerReplica > 1 {
			p.add("inference.gpusPerReplica", "the parakeet runtime runs on one GPU")
		}
		if len(in.Args) > 0 {
			p.add("inference.args", "the parakeet runtime takes no args")
		}
		// The parakeet runtime is NVIDIA's ASR NIM: the agent sets its NIM_
		// variables, and its NGC key is the rack's (a file on the node),
		// never a spec's, which others read (docs/inference.md).
		for i, e := range s.EnvVars {
			switch name := strings.ToUpper(e.Name); {
			case name == "NGC_API_KEY":
				p.add(fmt.Sprintf("envVars[%d].name", i), "NGC_API_KEY is not set in a spec: the parakeet runtime's NGC key is the rack's, read from a file on the node")
			case strings.HasPrefix(name, "NIM_"):
				p.add(fmt.Sprintf("envVars[%d].name", i), "%q: the agent sets the parakeet runtime's NIM_ variables", e.Name)
			case strings.ContainsAny(e.Value, "\r\n"):
				// They reach the NIM's container through docker run
				// --env-file, one NAME=value a line.
				p.add(fmt.Sprintf("envVars[%d].value", i), "the parakeet runtime's variables are one line each: %q has a line break", e.Name)
			}
		}
		return
	}
	if in.Runtime == RuntimeLlamaCPP {
		if in.GPUsPerReplica > 1 {
			p.add("inference.gpusPerReplica", "the llama.cpp runtime runs a replica on one GPU")
		}
		for _, k := range sortedKeys(in.Args) {
			if msg := llamaArgProblem(k, in.Args[k]); msg != "" {
				p.add("inference.args."+k, "%s", msg)
			}
		}
		// llama-server reads LLAMA_ARG_* as its flags: a variable could set
		// what the platform sets (the host it listens on, the model file).
		for i, e := range s.EnvVars {
			if strings.HasPrefix(strings.ToUpper(e.Name), "LLAMA_") {
				p.add(fmt.Sprintf("envVars[%d].name", i), "%q: llama-server reads LLAMA_ variables as its flags; set serving options in inference.args", e.Name)
			}
		}
		return
	}
	for _, k := range sortedKeys(in.Args) {
		if msg := vllmArgProblem(k, in.Args[k]); msg != "" {
			p.add("inference.args."+k, "%s", msg)
		}
	}
}

// LlamaCPPArgs lists the llama-server flags (without "--") that
// inference.args may set for the llama.cpp runtime. The model, its alias,
// the host and port, the web UI (off), the metrics and slots endpoints
// (on) are the platform's. Every one is a flag of the llama-server that
// CosmicAC builds (hack/build-llama.sh; internal/inferagent's
// testdata/llama-server-help-*.txt, kept so by a test).
var LlamaCPPArgs = []string{
	"batch-size", "cache-ram", "cache-reuse", "cont-batching", "ctx-size", "embeddings", "flash-attn",
	"jinja", "n-predict", "parallel", "pooling", "seed", "threads", "threads-batch", "ubatch-size",
}

// LlamaCPPBoolArgs are the LlamaCPPArgs that take true or false, and
// LlamaCPPOnByDefault those llama-server turns on unless told --no-….
var (
	LlamaCPPBoolArgs    = []string{"cont-batching", "embeddings", "jinja"}
	LlamaCPPOnByDefault = []string{"cont-batching", "jinja"}
)

func llamaArgProblem(k, v string) string {
	intAtLeast := func(min int64) string { return intProblem(v, min, 1<<30) }
	oneOf := func(set []string) string { return oneOfProblem(v, set) }
	switch k {
	case "ctx-size", "cache-reuse":
		return intAtLeast(0)
	case "n-predict", "seed", "cache-ram": // cache-ram: MiB of prompt cache in memory, -1 unbounded, 0 none
		return intAtLeast(-1)
	case "parallel", "batch-size", "ubatch-size", "threads", "threads-batch":
		return intAtLeast(1)
	case "pooling":
		return oneOf([]string{"none", "mean", "cls", "last", "rank"})
	case "flash-attn":
		return oneOf([]string{"on", "off", "auto"})
	case "cont-batching", "embeddings", "jinja":
		return oneOf([]string{"true", "false"})
	case "model", "alias", "host", "port", "api-key", "api-key-file", "webui", "metrics", "slots", "props":
		return "is set by the platform and cannot be set"
	}
	return fmt.Sprintf("--%s is not an allowed llama.cpp argument (allowed: %s)", k, strings.Join(LlamaCPPArgs, ", "))
}

// VLLMArgs lists the vLLM flags (without "--") that inference.args may set.
// Parallelism (tensor, pipeline, data) is derived from placement, and
// host, port, model, served-model-name and api-key are set by the platform.
// Every one is a flag of the `vllm serve` that CosmicAC targets
// (internal/inferagent's testdata/vllm-serve-flags-*.txt; docs/inference.md,
// "The target vLLM version").
var VLLMArgs = []string{
	"block-size", "convert", "dtype", "enable-auto-tool-choice", "enable-chunked-prefill",
	"enable-prefix-caching", "enforce-eager", "gpu-memory-utilization",
	"kv-cache-dtype", "max-model-len", "max-num-batched-tokens", "max-num-seqs",
	"quantization", "reasoning-parser", "revision", "runner", "seed",
	"tokenizer", "tool-call-parser", "trust-remote-code",
}

// vllmRemovedArgs are flags that vllm serve used to take and the targeted
// version refuses ("unrecognized arguments"), with where they went.
var vllmRemovedArgs = map[string]string{
	"swap-space":                       "vLLM PR #36216, since 0.18: the V1 engine has no CPU swap space",
	"disable-frontend-multiprocessing": "vLLM PR #37612, since 0.19: a V0-engine option, removed with V0",
}

func vllmArgProblem(k, v string) string {
	intAtLeast := func(min int64) string { return intProblem(v, min, math.MaxInt64) }
	oneOf := func(set []string) string { return oneOfProblem(v, set) }
	switch k {
	case "max-model-len", "max-num-seqs", "max-num-batched-tokens":
		return intAtLeast(1)
	case "seed":
		return intAtLeast(0)
	case "block-size":
		return oneOf([]string{"8", "16", "32", "64", "128"})
	case "dtype":
		return oneOf(dtypes)
	case "quantization":
		if v == "gguf" { // vllm/model_executor/layers/quantization: gone from the registry
			return `"gguf" is not a quantization of the vLLM version CosmicAC runs (vLLM PR #39612, since 0.24: GGUF moved to the separate vllm-gguf-plugin); serve a GGUF model with the llama.cpp runtime`
		}
		return oneOf(quantizations)
	case "kv-cache-dtype":
		return oneOf(kvCacheDtypes)
	case "runner": // vllm/config/model.py, RunnerOption
		return oneOf([]string{"auto", "generate", "pooling"})
	case "convert": // vllm/config/model.py, ConvertOption; "reward" is gone by 0.18
		// (docs.vllm.ai/en/v0.18.0/models/pooling_models/: reward models
		// take --convert embed)
		return oneOf([]string{"auto", "none", "embed", "classify"})
	case "gpu-memory-utilization":
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0 && f <= 1) {
			return fmt.Sprintf("%q is not a fraction in (0, 1]", v)
		}
		return ""
	case "enable-prefix-caching", "trust-remote-code", "enforce-eager", "enable-chunked-prefill", "enable-auto-tool-choice":
		return oneOf([]string{"true", "false"})
	case "tool-call-parser", "reasoning-parser":
		if !parserNameRe.MatchString(v) {
			return fmt.Sprintf("%q is not a parser name", v)
		}
		return ""
	case "tokenizer":
		if len(v) > 256 || !hfModelRe.MatchString(v) {
			return fmt.Sprintf("%q is not a model name", v)
		}
		return ""
	case "revision":
		if !revisionRe.MatchString(v) {
			return fmt.Sprintf("%q is not a revision", v)
		}
		return ""
	case "tensor-parallel-size", "pipeline-parallel-size", "data-parallel-size":
		return "is derived from placement and cannot be set"
	case "host", "port", "model", "served-model-name", "api-key":
		return "is set by the platform and cannot be set"
	}
	if why, ok := vllmRemovedArgs[k]; ok {
		return fmt.Sprintf("--%s is not a flag of the vLLM version CosmicAC runs (removed in %s)", k, why)
	}
	return fmt.Sprintf("--%s is not an allowed vLLM argument (allowed: %s)", k, strings.Join(VLLMArgs, ", "))
}

// intProblem says why v is not an integer from min to max ("": it is).
func intProblem(v string, min, max int64) string {
	n, err := strconv.ParseInt(v, 10, 64)
	switch {
	case (err != nil || n < min) && max == math.MaxInt64:
		return fmt.Sprintf("%q is not an integer ≥ %d", v, min)
	case err != nil || n < min || n > max:
		return fmt.Sprintf("%q is not an integer from %d to %d", v, min, max)
	}
	return ""
}

// oneOfProblem says why v is not one of set ("": it is).
func oneOfProblem(v string, set []string) string {
	if !slices.Contains(set, v) {
		return fmt.Sprintf("%q is not one of %s", v, strings.Join(set, ", "))
	}
	return ""
}

func printable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' })
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// adapterNameRe is a LoRA adapter's name: what follows the colon in
// SERVED_NAME:ADAPTER, so no colon of its own.
var adapterNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// checkAdapters checks inference.adapters: at most MaxAdapters, each named
// once by a name of adapterNameRe, its source a model name of the runtime's
// kind; the parakeet runtime takes none.
func checkAdapters(p *problems, in *InferenceSpec) {
	if len(in.Adapters) == 0 {
		return
	}
	if in.Runtime == RuntimeParakeet {
		p.add("inference.adapters", "the parakeet runtime takes no adapters")
		return
	}
	if len(in.Adapters) > MaxAdapters {
		p.add("inference.adapters", "%d adapters, more than %d", len(in.Adapters), MaxAdapters)
		return
	}
	seen := map[string]bool{}
	for i, a := range in.Adapters {
		f := fmt.Sprintf("inference.adapters[%d]", i)
		switch {
		case !adapterNameRe.MatchString(a.Name):
			p.add(f+".name", "%q is not an adapter name: 1 to 64 letters, digits, '-', '_' and '.', starting with a letter or a digit", a.Name)
		case seen[a.Name]:
			p.add(f+".name", "%q is named twice", a.Name)
		}
		seen[a.Name] = true
		switch {
		case a.Source == "":
			p.add(f+".source", "is required")
		case len(a.Source) > 256 || !hfModelRe.MatchString(a.Source):
			if in.Runtime == RuntimeLlamaCPP {
				p.add(f+".source", "%q is not a file of the node's model directory (want NAME or ORG/NAME: the file ORG/NAME.gguf there)", a.Source)
			} else {
				p.add(f+".source", "%q is not a model name (want ORG/NAME as on Hugging Face)", a.Source)
			}
		}
	}
}

// checkAutoscaling checks inference.autoscaling: 0 ≤ minReplicas ≤
// maxReplicas ≤ MaxReplicas, maxReplicas at least 1, replicas (the count
// it starts at) within them, and the target and cool-down in range.
func checkAutoscaling(p *problems, in *InferenceSpec) {
	a := in.Autoscaling
	if a == nil {
		return
	}
	const f = "inference.autoscaling."
	checkRange(p, f+"minReplicas", a.MinReplicas, 0, MaxReplicas)
	checkRange(p, f+"maxReplicas", a.MaxReplicas, 1, MaxReplicas)
	if a.MaxReplicas >= 1 && a.MinReplicas > a.MaxReplicas {
		p.add(f+"minReplicas", "is %d, more than maxReplicas (%d)", a.MinReplicas, a.MaxReplicas)
	}
	if in.Replicas >= 1 && a.MaxReplicas >= 1 && a.MinReplicas <= a.MaxReplicas &&
		(in.Replicas < a.MinReplicas || in.Replicas > a.MaxReplicas) {
		p.add("inference.replicas", "is %d: an autoscaled job starts with between minReplicas and maxReplicas (%d to %d)", in.Replicas, max(a.MinReplicas, 1), a.MaxReplicas)
	}
	checkRange(p, f+"targetInFlight", a.TargetInFlight, 1, MaxTargetInFlight)
	checkRange(p, f+"scaleDownDelay", a.ScaleDownDelay, MinScaleDownDelay, MaxScaleDownDelay)
}
