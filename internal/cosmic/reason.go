package cosmic

// ReasonCode is a stable, machine-readable cause of a job's status.
type ReasonCode string

// The reason codes.
const (
	ReasonInvalidSpec         ReasonCode = "invalid_spec"
	ReasonNoSuchLocation      ReasonCode = "no_such_location"
	ReasonNoSuchGPUModel      ReasonCode = "no_such_gpu_model"
	ReasonExceedsNodeGPUs     ReasonCode = "exceeds_node_gpus"
	ReasonExceedsLocationGPUs ReasonCode = "exceeds_location_gpus"
	ReasonExceedsNodeCPU      ReasonCode = "exceeds_node_cpu"
	ReasonExceedsNodeMemory   ReasonCode = "exceeds_node_memory"
	ReasonNoCapacity          ReasonCode = "no_capacity"
	ReasonTeamQuota           ReasonCode = "team_quota"
	ReasonImportFailed        ReasonCode = "import_failed"
	ReasonVMICrashed          ReasonCode = "vmi_crashed"
	ReasonVMIUnschedulable    ReasonCode = "vmi_unschedulable"
	ReasonWorkerUnreachable   ReasonCode = "worker_unreachable"
	ReasonNodeLost            ReasonCode = "node_lost"
	ReasonKilled              ReasonCode = "killed"
	ReasonTimeout             ReasonCode = "timeout"
	ReasonAgentTimeout        ReasonCode = "agent_timeout"
	ReasonCommandFailed       ReasonCode = "command_failed"
	ReasonReplicaFailed       ReasonCode = "replica_failed"
	ReasonRackRemoved         ReasonCode = "rack_removed"
	ReasonRestartRequested    ReasonCode = "restart_requested"
	ReasonVMIsRecreated       ReasonCode = "vmis_recreated"
	ReasonReplicaDeleted      ReasonCode = "replica_deleted"
	ReasonModelLoadFailed     ReasonCode = "model_load_failed"
	ReasonRackMisconfigured   ReasonCode = "rack_misconfigured"
	ReasonNotInCatalogue      ReasonCode = "not_in_catalogue"
	ReasonRackRefused         ReasonCode = "rack_refused"
	ReasonScaledDown          ReasonCode = "scaled_down"
	ReasonScaledToZero        ReasonCode = "scaled_to_zero"
	ReasonScalingUp           ReasonCode = "scaling_up"
	ReasonReplaced            ReasonCode = "replaced"
	ReasonRolloutFailed       ReasonCode = "rollout_failed"
	// A volume's data could not be synced (docs/data.md).
	ReasonDatastoreUnreachable ReasonCode = "datastore_unreachable"
	ReasonBadCredentials       ReasonCode = "bad_credentials"
	ReasonNoSuchContainer      ReasonCode = "no_such_container"
	ReasonVolumeSyncFailed     ReasonCode = "volume_sync_failed"
	// A standalone volume is mounted by another job (docs/data.md).
	ReasonVolumeInUse ReasonCode = "volume_in_use"
)

// Reason explains a status: a code, a human message and a suggested fix.
type Reason struct {
	Code    ReasonCode `json:"code"`
	Message string     `json:"message"`
	Fix     string     `json:"fix,omitempty"`
}

type reasonText struct{ message, fix string }

var reasons = map[ReasonCode]reasonText{
	ReasonInvalidSpec:          {"the job spec is invalid", "Correct the fields named in the message and create the job again."},
	ReasonNoSuchLocation:       {"no rack is registered in the job's location", "List the locations you may use with `cosmicac locations` and pick one (a platform admin registers racks in new ones)."},
	ReasonNoSuchGPUModel:       {"no rack of the job's location has the GPU model asked for", "List each location's GPU models with `cosmicac locations`, or leave resources.gpuModel empty to accept any."},
	ReasonExceedsNodeGPUs:      {"the job asks for more GPUs than any node of its location holds", "Ask for at most the GPUs of one node, or use a vLLM managed-inference job, whose replicas may span nodes."},
	ReasonExceedsLocationGPUs:  {"the job's replicas need more GPUs than all nodes of its location hold together", "Ask for fewer replicas or fewer GPUs per replica, or add nodes to the location."},
	ReasonExceedsNodeCPU:       {"the job asks for more CPU than any node of its location with room for its GPUs can give", "Ask for fewer vCPUs (resources.cpu), or fewer GPUs per replica: `cosmicac locations` shows the most CPU a node of each location has."},
	ReasonExceedsNodeMemory:    {"the job asks for more memory than any node of its location with room for its GPUs can give", "Ask for less memory (resources.memory, GiB), or fewer GPUs per replica: `cosmicac locations` shows the most memory a node of each location has."},
	ReasonNoCapacity:           {"waiting for GPUs to free up", "Wait: the job starts when GPUs free up. Delete or kill other jobs to free GPUs sooner."},
	ReasonTeamQuota:            {"waiting for the team's GPU quota", "Wait: the job starts when the team's other jobs free GPUs under its quota. Kill or delete some of them, or ask an admin to raise the quota."},
	ReasonImportFailed:         {"the VM's root disk could not be imported from the image", "Check that the image exists, is a VM disk image and that the cluster can pull it; see the job's system logs."},
	ReasonVMICrashed:           {"the job's virtual machine crashed", "See the job's logs, then restart the job."},
	ReasonVMIUnschedulable:     {"the cluster could not schedule the job's virtual machine", "Check the node's GPU passthrough and KubeVirt configuration; see the job's system logs."},
	ReasonWorkerUnreachable:    {"the rack's worker cannot be reached", "Wait for the worker to come back, or check that cosmicac wrk-server-k8s-nvidia runs and is reachable."},
	ReasonNodeLost:             {"the node running the job was lost", "Restart the job; it will be placed again."},
	ReasonKilled:               {"the job was killed", "Restart the job to run it again; its storage was kept."},
	ReasonTimeout:              {"the job ran past its timeout", "Raise spec.timeout or set timeoutAutoRestart, then restart the job."},
	ReasonAgentTimeout:         {"the replica's agent did not connect within its rack's agent deadline", "See the job's system logs (cosmicac jobs logs --source system) for the step it stopped at: the image needs cloud-init for the agent to be delivered at boot. If the rack only boots slowly, raise its deadline (cosmicac racks register --agent-deadline), then restart the job."},
	ReasonCommandFailed:        {"the job's command exited with an error", "See the job's logs and exit code, fix the command and restart the job."},
	ReasonReplicaFailed:        {"a replica of the job failed", "See the replica's logs; restart the replica or the job."},
	ReasonRackRemoved:          {"the rack holding the job was removed", "The job is placed again on another rack of its location when one has room."},
	ReasonRestartRequested:     {"a restart was requested", ""},
	ReasonVMIsRecreated:        {"the rack's worker lost the job's VMIs and is creating them again (it restarted, or they vanished)", "Wait: the job runs again once its VMIs are up; its command starts anew. On the simulated rack every restart of `cosmicac up` does this, as it keeps no process across a restart."},
	ReasonReplicaDeleted:       {"a replica was deleted", "Wait: the replica is placed again, perhaps on another node."},
	ReasonModelLoadFailed:      {"the model server failed to load the model", "Check the model name, its license gating and the GPU memory it needs; see the job's application logs."},
	ReasonRackMisconfigured:    {"the rack cannot run jobs until an operator fixes its configuration", "Ask the rack's operator: `cosmicac racks list` (platform admins) shows what is wrong and the fix. The job starts once it is fixed."},
	ReasonNotInCatalogue:       {"no rack of the job's location can run it", "See what each location runs with `cosmicac locations` (images, job types, runtimes, the most vCPUs and memory a VM gets) and change the spec to match, or pick another location."},
	ReasonScaledDown:           {"the autoscaler removed the replica: the job's load needs fewer", ""},
	ReasonScaledToZero:         {"no replica runs: the job was idle and holds no GPU", "Nothing to do: the next request to the model starts a replica, and is answered once it is ready."},
	ReasonScalingUp:            {"no replica is ready yet: the autoscaler is starting one for the requests waiting", "Wait: requests are held until a replica is ready (docs/inference.md, \"Autoscaling\")."},
	ReasonReplaced:             {"a rolling update replaces the replica with one of the new spec", "Wait: the new replica is placed once this one is gone; the others serve meanwhile."},
	ReasonRolloutFailed:        {"a replica of the updated spec failed, so the job went back to the spec before", "See the failed replica's system and application logs (cosmicac jobs logs), fix the spec and update the job again."},
	ReasonDatastoreUnreachable: {"a volume's datastore did not answer the job's VM", "Check the datastore's endpoint (cosmicac datastores get ALIAS) and that the job's VM can reach it, then restart the job."},
	ReasonBadCredentials:       {"a volume's datastore refused its credentials", "A team admin replaces them (cosmicac datastores credentials ALIAS --access-key KEY), then restart the job."},
	ReasonNoSuchContainer:      {"a volume's container does not exist in its datastore", "Create the bucket, or correct volumes[].volumeSource.dataStore.container, then create the job again."},
	ReasonVolumeSyncFailed:     {"a volume's data could not be copied", "See the job's system logs (cosmicac jobs logs --source system) for the volume and the error; restart the job."},
	ReasonVolumeInUse:          {"waiting for a standalone volume another job of the team has mounted", "Wait: the job starts when that job stops (a standalone volume is mounted by one job at a time). Kill the other job to start this one sooner."},
	ReasonRackRefused:          {"the rack's worker refused the job, which it cannot run", "See what each location runs with `cosmicac locations`, then create the job again with an image, type and size its rack runs; its GPUs were released."},
}

// KnownReason reports whether code is in the registry.
func KnownReason(code ReasonCode) bool { _, ok := reasons[code]; return ok }

// NewReason builds the Reason for code, appending detail (if any) to the
// code's message: NewReason(ReasonExceedsNodeGPUs, "9 GPUs asked, nodes of us hold 8").
// An unregistered code keeps detail (or the code) as its message.
func NewReason(code ReasonCode, detail string) Reason {
	t, ok := reasons[code]
	if !ok {
		msg := detail
		if msg == "" {
			msg = string(code)
		}
		return Reason{Code: code, Message: msg}
	}
	msg := t.message
	if detail != "" {
		msg += ": " + detail
	}
	return Reason{Code: code, Message: msg, Fix: t.fix}
}
