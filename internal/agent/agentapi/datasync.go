package agentapi

// MethodDataSync asks an instance agent to pull or push volumes of its job
// now (POST /api/v1/jobs/{id}/datasync; docs/data.md). The app-node calls
// it; the agent answers once each volume is done.
const MethodDataSync = "agent.datasync"

// DataSyncParams name the direction ("pull": from the datastore into the
// volume; "push": back) and the volumes, by their index in the job's
// spec.volumes.
type DataSyncParams struct {
	Direction string `json:"direction"`
	Volumes   []int  `json:"volumes"`
}

// DataSyncReply says what each volume's sync did, in the params' order.
type DataSyncReply struct {
	Volumes []VolumeSync `json:"volumes"`
}

// VolumeSync is one volume's sync.
type VolumeSync struct {
	Index     int      `json:"index"`
	MountPath string   `json:"mountPath"`
	Objects   int64    `json:"objects"`
	Bytes     int64    `json:"bytes"`
	Unchanged int64    `json:"unchanged,omitempty"`
	Deleted   int64    `json:"deleted,omitempty"`
	Skipped   []string `json:"skipped,omitempty"`
	// Error and Reason say why the volume's sync failed (empty: it did
	// not); its files are kept as they were.
	Error  string `json:"error,omitempty"`
	Reason string `json:"reason,omitempty"`
}
