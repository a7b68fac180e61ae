package cosmic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// JobType is the kind of workload a job runs.
type JobType string

// The job types.
const (
	// TypeGPUContainer is a GPU VM with shell access, used like a remote machine.
	TypeGPUContainer JobType = "gpu-container"
	// TypeManagedInference serves an open model behind an OpenAI-compatible API.
	TypeManagedInference JobType = "managed-inference"
)

// Valid reports whether t is a known job type.
func (t JobType) Valid() bool { return t == TypeGPUContainer || t == TypeManagedInference }

// Runtime is the model server of a managed-inference job.
type Runtime string

// The inference runtimes.
const (
	RuntimeVLLM     Runtime = "vllm"
	RuntimeParakeet Runtime = "parakeet"
	// RuntimeLlamaCPP is llama.cpp's llama-server serving a GGUF model of
	// the node's model directory (docs/inference.md, "llama.cpp").
	RuntimeLlamaCPP Runtime = "llama.cpp"
)

// Runtimes are every inference runtime, the default first.
var Runtimes = []Runtime{RuntimeVLLM, RuntimeParakeet, RuntimeLlamaCPP}

// Routing is how proxy-inference picks a replica of a managed-inference
// job for each request (docs/inference.md, "Routing").
type Routing string

// Routing policies.
const (
	// RoutingLeastOutstanding sends each request to the ready replica with
	// the fewest requests in flight (ties at random).
	RoutingLeastOutstanding Routing = "least-outstanding"
	// RoutingPrefix sends a request to the replica most likely to hold its
	// prompt's prefix in its engine's cache (the replica the longest run of
	// its leading blocks went to last), bounded by load: a replica with
	// more than a quarter over the mean of requests in flight is passed
	// over; with no prefix held, least-outstanding.
	RoutingPrefix Routing = "prefix"
)

// DefaultRouting is the routing of a job that names none.
const DefaultRouting = RoutingPrefix

// Routings are every routing policy, the default first.
var Routings = []Routing{RoutingPrefix, RoutingLeastOutstanding}

// Task is what a managed-inference job's model server serves, and so which
// request proves it works (the inference agent's probe).
type Task string

// The served tasks.
const (
	// TaskGenerate: /v1/chat/completions and /v1/completions (vLLM's
	// "generate" runner).
	TaskGenerate Task = "generate"
	// TaskEmbed: /v1/embeddings only (vLLM's "pooling" runner, or a model
	// converted with --convert embed); vLLM serves no /v1/completions then.
	TaskEmbed Task = "embed"
	// TaskTranscription: /v1/audio/transcriptions (parakeet).
	TaskTranscription Task = "transcription"
)

// Task is the task the job's runtime serves: transcription for parakeet;
// embed for vLLM with inference.args runner "pooling" or convert "embed";
// else generate. With runner "auto" vLLM chooses from the model's
// architecture, which the platform does not read: an embedding model should
// say runner "pooling" (the agent's probe also falls back to /v1/embeddings
// when /v1/completions is not served).
func (in *InferenceSpec) Task() Task {
	switch {
	case in.Runtime == RuntimeParakeet:
		return TaskTranscription
	case in.Runtime == RuntimeLlamaCPP:
		if in.Args["embeddings"] == "true" {
			return TaskEmbed
		}
		return TaskGenerate
	case in.Args["runner"] == "pooling", in.Args["convert"] == "embed":
		return TaskEmbed
	}
	return TaskGenerate
}

// ParakeetModel is the only model the parakeet runtime serves.
const ParakeetModel = "nvidia/parakeet-tdt-0.6b-v3"

// Spec is what a user asks for when creating a job. Its JSON field names are
// the API's wire names (docs/api.md). Call Default, then Validate.
//
// Units: DiskGB, Resources.Memory, Resources.EphemeralStorage and
// Resources.GPUMemory are whole GiB; Resources.CPU is vCPUs; Timeout is
// seconds (0: none). On input, "region" is accepted as an alias of
// "location"; output always says "location".
type Spec struct {
	Type               JobType           `json:"type"`
	Name               string            `json:"name,omitempty"`
	Labels             map[string]string `json:"labels,omitempty"`
	Location           string            `json:"location"`
	Image              string            `json:"image,omitempty"`
	DiskGB             int               `json:"diskGB,omitempty"`
	Command            []string          `json:"command,omitempty"`
	EnvVars            []EnvVar          `json:"envVars,omitempty"`
	Resources          Resources         `json:"resources"`
	SSHPublicKeys      []string          `json:"sshPublicKeys,omitempty"`
	DefaultHTTPPort    int               `json:"defaultHttpPort,omitempty"`
	GRPCPort           int               `json:"grpcPort,omitempty"`
	UnsecureHTTP       bool              `json:"unsecureHttp,omitempty"`
	Timeout            int               `json:"timeout,omitempty"`
	TimeoutAutoRestart bool              `json:"timeoutAutoRestart,omitempty"`
	Volumes            []Volume          `json:"volumes,omitempty"`
	ReadUser           string            `json:"readUser,omitempty"`
	PartnerID          string            `json:"partnerId,omitempty"`
	Inference          *InferenceSpec    `json:"inference,omitempty"`
}

// EnvVar is one environment variable set inside the job's VM.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Resources is what one replica (one job, for gpu-container) needs.
//
// For managed-inference, GPU is the GPU count of one replica and must agree
// with Inference.GPUsPerReplica when both are set. CPU and Memory are totals
// for the replica; a replica spread over k nodes gives each node's VMI its
// share in proportion to its GPUs. GPUBrand, GPUMemory, EphemeralStorage,
// Flavor, FlavorCount, PrivateNetwork and PublicNetwork are stored and
// validated but not used by placement yet.
type Resources struct {
	GPU              int    `json:"gpu"`
	GPUModel         string `json:"gpuModel,omitempty"`
	GPUBrand         string `json:"gpuBrand,omitempty"`
	GPUMemory        int    `json:"gpuMemory,omitempty"`
	CPU              int    `json:"cpu,omitempty"`
	Memory           int    `json:"memory,omitempty"`
	EphemeralStorage int    `json:"ephemeralStorage,omitempty"`
	Flavor           string `json:"flavor,omitempty"`
	FlavorCount      int    `json:"flavorCount,omitempty"`
	PrivateNetwork   int    `json:"privateNetwork,omitempty"`
	PublicNetwork    int    `json:"publicNetwork,omitempty"`
}

// Volume is data mounted into the job (docs/data.md), in the shape of
// OVHcloud AI Training's job volumes: where the data comes from
// (volumeSource: a datastore's container and prefix, a public Git
// repository, or a standalone volume that outlives the job), where it is
// mounted, and what the job may do with it (Permission). The agent in
// the job's VM fills the datastore and Git volumes before the command
// starts and pushes RW ones back (docs/data.md); a standalone volume is a
// disk the rack keeps, mounted as it is.
//
// On input the source may also be given as OVH's shorthands, dataStore,
// publicGit, standalone and targetDataStore beside mountPath, or its
// older container and region (the datastore's alias) with prefix
// (volumeIn); output is always volumeSource and volumeTarget.
type Volume struct {
	Name      string `json:"name,omitempty"`
	MountPath string `json:"mountPath"`
	// Permission is RO (read only, the default), RW (read-write: what
	// the job wrote is pushed back when it stops) or RWD (RW, and the
	// remote objects the job deleted are deleted too). Given in any
	// case; Default makes it upper case.
	Permission string `json:"permission,omitempty"`
	// Cache keeps a copy of the data on the node for the next job that
	// mounts the same data.
	Cache  bool          `json:"cache,omitempty"`
	Source VolumeSource  `json:"volumeSource"`
	Target *VolumeTarget `json:"volumeTarget,omitempty"`
}

// PushesVolumes says whether the job's agent pushes volumes back when it
// stops: a gpu-container job with an RW or RWD datastore volume. Its
// rack gives its VMs the time to (docs/data.md, "Push at kill").
func (s Spec) PushesVolumes() bool {
	if s.Type != TypeGPUContainer {
		return false
	}
	for _, v := range s.Volumes {
		if p := strings.ToUpper(v.Permission); v.Source.DataStore != nil && (p == PermissionRW || p == PermissionRWD) {
			return true
		}
	}
	return false
}

// Volume permissions.
const (
	PermissionRO  = "RO"
	PermissionRW  = "RW"
	PermissionRWD = "RWD"
)

// VolumeSource says where a volume's data comes from; exactly one is set.
type VolumeSource struct {
	DataStore  *DataStoreSource  `json:"dataStore,omitempty"`
	PublicGit  *PublicGitSource  `json:"publicGit,omitempty"`
	Standalone *StandaloneSource `json:"standalone,omitempty"`
}

// VolumeTarget is where an RW or RWD volume is pushed, when not back to
// its source.
type VolumeTarget struct {
	TargetDataStore *DataStoreSource `json:"targetDataStore,omitempty"`
}

// DataStoreSource is a container (bucket) of a team's datastore, under a
// prefix. Archive, when set, names the format the data is kept in there
// (one object, unpacked into the volume and packed back).
type DataStoreSource struct {
	Alias     string `json:"alias"`
	Container string `json:"container"`
	Prefix    string `json:"prefix,omitempty"`
	Archive   string `json:"archive,omitempty"`
	Internal  bool   `json:"internal,omitempty"`
}

// PublicGitSource is a public Git repository cloned into the volume.
type PublicGitSource struct {
	URL string `json:"url"`
}

// StandaloneSource is a named volume of the job's team that outlives the
// job: a disk its rack keeps, made empty the first time a job mounts it
// and mounted again by the next job of the team that names it, which the
// ork places on that rack (docs/data.md, "Standalone volumes").
type StandaloneSource struct {
	Name string `json:"name"`
}

// StandaloneVolumes are the names of the job's standalone volumes.
func (s Spec) StandaloneVolumes() []string {
	var out []string
	for _, v := range s.Volumes {
		if st := v.Source.Standalone; st != nil {
			out = append(out, st.Name)
		}
	}
	return out
}

// StoredVolume is a standalone volume as the rack that keeps it reports
// it (worker.Capacity) and the API lists it.
type StoredVolume struct {
	Team string `json:"team"`
	Name string `json:"name"`
	// Rack keeps it; a job that mounts it is placed there.
	Rack string `json:"rack,omitempty"`
	// Bytes is what it takes on the rack's storage now; Size what it
	// may grow to.
	Bytes int64 `json:"bytes"`
	Size  int64 `json:"size,omitempty"`
	// Job is the job whose replica has it mounted, if any.
	Job string `json:"job,omitempty"`
}

// VolumeKey names a standalone volume: team and name.
func VolumeKey(team, name string) string { return team + "/" + name }

// InferenceSpec is the serving part of a managed-inference job.
type InferenceSpec struct {
	Runtime         Runtime           `json:"runtime"`
	Model           string            `json:"model"`
	ServedModelName string            `json:"servedModelName,omitempty"`
	Replicas        int               `json:"replicas,omitempty"`
	GPUsPerReplica  int               `json:"gpusPerReplica,omitempty"`
	RequireAuth     *bool             `json:"requireAuth,omitempty"`
	Args            map[string]string `json:"args,omitempty"`
	// Routing is how the proxy picks a replica for each request (default
	// DefaultRouting).
	Routing Routing `json:"routing,omitempty"`
	// Adapters are LoRA adapters every replica loads beside the model;
	// a request for SERVED_NAME:ADAPTER is served with that adapter
	// applied (docs/inference.md, "LoRA adapters").
	Adapters []Adapter `json:"adapters,omitempty"`
	// ModelSource, when set, is where the replicas take the model's
	// weights from: the objects under a prefix of one of the team's
	// datastores (for llama.cpp, the one GGUF file there), copied once
	// into each node's content-addressed cache and served from it by
	// every replica and job after (docs/data.md, "Model weights from a
	// datastore"). Model is then the model's name only.
	ModelSource *DataStoreSource `json:"modelSource,omitempty"`
	// Autoscaling, when set, sizes the job to its load: Replicas is then
	// the count the scaler set last (it starts at MinReplicas, at least
	// 1), and may be 0 (docs/inference.md, "Autoscaling").
	Autoscaling *Autoscaling `json:"autoscaling,omitempty"`
}

// Autoscaling sizes a managed-inference job's replicas to the requests it
// has: in flight at its replicas, and waiting at the proxy for one.
type Autoscaling struct {
	// MinReplicas is the fewest replicas the job keeps (0: it holds no
	// GPU while idle, and the next request starts one).
	MinReplicas int `json:"minReplicas"`
	// MaxReplicas is the most replicas the job runs.
	MaxReplicas int `json:"maxReplicas"`
	// TargetInFlight is the requests per replica the scaler aims at
	// (default DefaultTargetInFlight): it runs ceil(requests / target)
	// replicas, within the bounds.
	TargetInFlight int `json:"targetInFlight,omitempty"`
	// ScaleDownDelay is how long, in seconds, the load must have wanted
	// fewer replicas before the scaler removes any (default
	// DefaultScaleDownDelay): replicas are added at once, removed after
	// this cool-down, so a short lull does not cost a cold start.
	ScaleDownDelay int `json:"scaleDownDelay,omitempty"`
}

// Autoscaling defaults and bounds.
const (
	DefaultTargetInFlight = 4
	DefaultScaleDownDelay = 300 // seconds
	MinScaleDownDelay     = 10
	MaxScaleDownDelay     = 86400
	MaxTargetInFlight     = 1024
)

// Autoscaled reports whether s is a managed-inference job whose replicas
// the scaler sizes.
func (s Spec) Autoscaled() bool {
	return s.Type == TypeManagedInference && s.Inference != nil && s.Inference.Autoscaling != nil
}

// Adapter is a LoRA adapter of a managed-inference job's model.
type Adapter struct {
	// Name is what a request adds to the served model name after a colon.
	Name string `json:"name"`
	// Source is where the runtime loads it from: for llama.cpp a GGUF of
	// the node's model directory, ORG/NAME for ORG/NAME.gguf there (as
	// inference.model); for vLLM a Hugging Face id.
	Source string `json:"source"`
}

// AdapterIndex answers the position of the adapter named name among in's,
// or -1.
func (in *InferenceSpec) AdapterIndex(name string) int {
	if in == nil {
		return -1
	}
	for i, a := range in.Adapters {
		if a.Name == name {
			return i
		}
	}
	return -1
}

// ServedName is the model name clients ask for: ServedModelName, else the
// model id.
func (in InferenceSpec) ServedName() string {
	if in.ServedModelName != "" {
		return in.ServedModelName
	}
	return in.Model
}

// AuthRequired reports whether the endpoint demands an API key (default true).
func (in *InferenceSpec) AuthRequired() bool {
	return in == nil || in.RequireAuth == nil || *in.RequireAuth
}

// Defaults applied by Default.
const (
	DefaultContainerDiskGB = 100
	DefaultInferenceDiskGB = 200
	DefaultCPUPerGPU       = 8
	DefaultMemoryPerGPU    = 64 // GiB
)

// Default fills the fields a user may leave out, in place, and leaves every
// field that is set (even to a bad value) alone so Validate can report it:
//
//   - resources.gpu: 1 for gpu-container. For managed-inference it is the
//     GPU count of one replica: copied from inference.gpusPerReplica or to
//     it, and 1 when neither is set;
//   - resources.cpu: 8 vCPUs per GPU; resources.memory: 64 GiB per GPU
//     (per replica for managed-inference);
//   - diskGB: 100 for gpu-container, 200 for managed-inference (weights);
//   - inference.runtime: parakeet when the model is ParakeetModel, else vllm;
//   - inference.model: ParakeetModel for the parakeet runtime;
//   - inference.replicas: 1 (autoscaled: minReplicas, at least 1);
//     inference.autoscaling.targetInFlight: 4, .scaleDownDelay: 300 s;
//     inference.servedModelName: the model;
//     inference.routing: DefaultRouting;
//     inference.requireAuth: true.
//
// An empty image of a managed-inference job means the platform's default
// image for the runtime (chosen by the worker's configuration). Default does
// not create an inference section that is missing, nor choose a location.
func (s *Spec) Default() {
	for i := range s.Volumes {
		v := &s.Volumes[i]
		v.Permission = strings.ToUpper(v.Permission)
		if v.Permission == "" {
			v.Permission = PermissionRO
			if v.Source.Standalone != nil {
				v.Permission = PermissionRW // a disk of the job's own, kept after it
			}
		}
	}
	switch s.Type {
	case TypeGPUContainer:
		if s.Resources.GPU == 0 {
			s.Resources.GPU = 1
		}
		if s.DiskGB == 0 {
			s.DiskGB = DefaultContainerDiskGB
		}
	case TypeManagedInference:
		if s.DiskGB == 0 {
			s.DiskGB = DefaultInferenceDiskGB
		}
		if in := s.Inference; in != nil {
			if in.Runtime == "" {
				in.Runtime = RuntimeVLLM
				if in.Model == ParakeetModel {
					in.Runtime = RuntimeParakeet
				}
			}
			if in.Runtime == RuntimeParakeet && in.Model == "" {
				in.Model = ParakeetModel
			}
			if a := in.Autoscaling; a != nil {
				if a.TargetInFlight == 0 {
					a.TargetInFlight = DefaultTargetInFlight
				}
				if a.ScaleDownDelay == 0 {
					a.ScaleDownDelay = DefaultScaleDownDelay
				}
				if in.Replicas == 0 {
					in.Replicas = max(a.MinReplicas, 1)
				}
			}
			if in.Replicas == 0 {
				in.Replicas = 1
			}
			switch {
			case in.GPUsPerReplica == 0 && s.Resources.GPU == 0:
				in.GPUsPerReplica, s.Resources.GPU = 1, 1
			case in.GPUsPerReplica == 0:
				in.GPUsPerReplica = s.Resources.GPU
			case s.Resources.GPU == 0:
				s.Resources.GPU = in.GPUsPerReplica
			}
			if in.ServedModelName == "" {
				in.ServedModelName = in.Model
			}
			if in.Routing == "" {
				in.Routing = DefaultRouting
			}
			if in.RequireAuth == nil {
				t := true
				in.RequireAuth = &t
			}
		} else if s.Resources.GPU == 0 {
			s.Resources.GPU = 1
		}
	default:
		return
	}
	if s.Resources.GPU > 0 {
		if s.Resources.CPU == 0 {
			s.Resources.CPU = DefaultCPUPerGPU * s.Resources.GPU
		}
		if s.Resources.Memory == 0 {
			s.Resources.Memory = DefaultMemoryPerGPU * s.Resources.GPU
		}
	}
}

// Replicas is the number of replicas the job runs: inference.replicas for
// managed-inference (at least 1, or 0 for an autoscaled job scaled to
// zero), else 1.
func (s Spec) Replicas() int {
	if s.Autoscaled() {
		return max(s.Inference.Replicas, 0)
	}
	if s.Type == TypeManagedInference && s.Inference != nil && s.Inference.Replicas > 0 {
		return s.Inference.Replicas
	}
	return 1
}

// GPUsPerReplica is the GPU count of one replica (resources.gpu).
func (s Spec) GPUsPerReplica() int {
	if s.Type == TypeManagedInference && s.Inference != nil && s.Inference.GPUsPerReplica > 0 {
		return s.Inference.GPUsPerReplica
	}
	return s.Resources.GPU
}

// TotalGPUs is replicas × GPUs per replica.
func (s Spec) TotalGPUs() int { return s.Replicas() * s.GPUsPerReplica() }

// MultiNode reports whether a replica may span several nodes of one rack:
// only vLLM inference replicas may.
func (s Spec) MultiNode() bool {
	return s.Type == TypeManagedInference && s.Inference != nil && s.Inference.Runtime == RuntimeVLLM
}

type plainSpec Spec

// UnmarshalJSON decodes a spec, accepting "region" as an alias of
// "location". It is lenient about unknown fields, as encoding/json is; use
// ParseSpec for untrusted input.
func (s *Spec) UnmarshalJSON(data []byte) error {
	return s.decode(data, false)
}

// ParseSpec decodes one JSON spec strictly: unknown fields and trailing data
// are errors (wrapping ErrInvalid). It does not call Default or Validate.
func ParseSpec(data []byte) (Spec, error) {
	var s Spec
	if err := s.decode(data, true); err != nil {
		return Spec{}, err
	}
	return s, nil
}

func (s *Spec) decode(data []byte, strict bool) error {
	var w struct {
		plainSpec
		Region string `json:"region"`
		// Volumes shadows plainSpec's: volumeIn takes OVH's shapes.
		Volumes []volumeIn `json:"volumes,omitempty"`
	}
	w.plainSpec = plainSpec(*s)
	for _, v := range s.Volumes {
		w.Volumes = append(w.Volumes, volumeIn{plainVolume: plainVolume(v)})
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(&w); err != nil {
		if strict {
			return fmt.Errorf("decode spec: %w: %w", ErrInvalid, err)
		}
		return err
	}
	if strict {
		if _, err := dec.Token(); err != io.EOF {
			return fmt.Errorf("decode spec: %w: trailing data after the spec", ErrInvalid)
		}
	}
	if w.Region != "" {
		switch w.Location {
		case "":
			w.Location = w.Region
		case w.Region:
		default:
			return &FieldError{Field: "region", Message: fmt.Sprintf("is an alias of location and disagrees with it (%q != %q)", w.Region, w.Location)}
		}
	}
	var p problems
	w.plainSpec.Volumes = nil
	for i, vin := range w.Volumes {
		w.plainSpec.Volumes = append(w.plainSpec.Volumes, vin.volume(&p, fmt.Sprintf("volumes[%d]", i)))
	}
	if err := p.err(); err != nil {
		return err
	}
	*s = Spec(w.plainSpec)
	return nil
}

type plainVolume Volume

// volumeIn is a volume as given: CosmicAC's shape, or OVH's shorthands
// beside it (Volume).
type volumeIn struct {
	plainVolume
	DataStore       *DataStoreSource  `json:"dataStore,omitempty"`
	PublicGit       *PublicGitSource  `json:"publicGit,omitempty"`
	Standalone      *StandaloneSource `json:"standalone,omitempty"`
	TargetDataStore *DataStoreSource  `json:"targetDataStore,omitempty"`
	// Container, Region and Prefix are OVH's older shape of a datastore
	// source: the container, the datastore's alias, the prefix.
	Container string `json:"container,omitempty"`
	Region    string `json:"region,omitempty"`
	Prefix    string `json:"prefix,omitempty"`
	// PublicSwift is OVH's public Swift container: refused, named.
	PublicSwift json.RawMessage `json:"publicSwift,omitempty"`
	// ID is OVH's output of a volume's identifier: accepted, so that a
	// spec read back can be given again, and dropped.
	ID string `json:"id,omitempty"`
}

// volume merges in's shorthands into a Volume, adding to p a problem for
// each that disagrees with what it stands for (f names the volume).
func (in volumeIn) volume(p *problems, f string) Volume {
	v := Volume(in.plainVolume)
	merge := func(field string, short *DataStoreSource, into **DataStoreSource, long string) {
		switch {
		case short == nil:
		case *into == nil:
			*into = short
		case **into != *short:
			p.add(f+"."+field, "disagrees with %s (give one)", long)
		}
	}
	merge("dataStore", in.DataStore, &v.Source.DataStore, "volumeSource.dataStore")
	if in.Container != "" || in.Region != "" || in.Prefix != "" {
		if in.Container == "" || in.Region == "" {
			p.add(f+".container", "with region (the datastore's alias) names a datastore source: give both, or volumeSource.dataStore")
		} else {
			merge("container", &DataStoreSource{Alias: in.Region, Container: in.Container, Prefix: in.Prefix}, &v.Source.DataStore, "volumeSource.dataStore")
		}
	}
	switch {
	case in.PublicGit == nil:
	case v.Source.PublicGit == nil:
		v.Source.PublicGit = in.PublicGit
	case *v.Source.PublicGit != *in.PublicGit:
		p.add(f+".publicGit", "disagrees with volumeSource.publicGit (give one)")
	}
	switch {
	case in.Standalone == nil:
	case v.Source.Standalone == nil:
		v.Source.Standalone = in.Standalone
	case *v.Source.Standalone != *in.Standalone:
		p.add(f+".standalone", "disagrees with volumeSource.standalone (give one)")
	}
	if in.TargetDataStore != nil {
		if v.Target == nil {
			v.Target = &VolumeTarget{}
		}
		merge("targetDataStore", in.TargetDataStore, &v.Target.TargetDataStore, "volumeTarget.targetDataStore")
	}
	if len(in.PublicSwift) > 0 {
		p.add(f+".publicSwift", "public Swift containers are not served: copy the data into a datastore (S3) and use dataStore")
	}
	return v
}
