package agentapi

import "time"

// MethodDataSync asks an instance agent to pull or push volumes of its job
// now (POST /api/v1/jobs/{id}/datasync; docs/data.md). The app-node calls
// it; the agent answers once each volume is done, or at once with Detach.
// The sync runs apart from the call: a caller that goes (a client's
// timeout) does not cut it, and Status.DataSync follows it.
const MethodDataSync = "agent.datasync"

// DataSyncParams name the direction ("pull": from the datastore into the
// volume; "push": back) and the volumes, by their index in the job's
// spec.volumes. Detach asks for the answer as soon as the sync has begun
// (every volume queued): its progress is then in Status.DataSync.
type DataSyncParams struct {
	Direction string `json:"direction"`
	Volumes   []int  `json:"volumes"`
	Detach    bool   `json:"detach,omitempty"`
}

// DataSyncReply says what each volume's sync did, in the params' order:
// the sync as it ended, or as it began with Detach.
type DataSyncReply = DataSyncStatus

// DataSyncStatus is a datasync: its direction, when it started and, once
// it is over, ended, and each volume's part.
type DataSyncStatus struct {
	Direction string       `json:"direction,omitempty"`
	StartedAt time.Time    `json:"startedAt,omitzero"`
	EndedAt   time.Time    `json:"endedAt,omitzero"`
	Volumes   []VolumeSync `json:"volumes"`
}

// CodeConflict is the fabric error code of a datasync asked for while the
// last one still runs.
const CodeConflict = "conflict"

// Volume sync states in a datasync.
const (
	SyncQueued  = "queued"
	SyncRunning = "running"
	SyncDone    = "done"
	SyncFailed  = "failed"
)

// VolumeSync is one volume's part of a datasync: its state, what moved
// so far and, once a pull's listing is read, the whole it moves.
type VolumeSync struct {
	Index     int    `json:"index"`
	MountPath string `json:"mountPath"`
	State     string `json:"state,omitempty"`
	Objects   int64  `json:"objects"`
	Bytes     int64  `json:"bytes"`
	// TotalObjects and TotalBytes are what a pull moves in all, once its
	// listing is read (0 for a push: a push finds what changed as it goes).
	TotalObjects int64    `json:"totalObjects,omitempty"`
	TotalBytes   int64    `json:"totalBytes,omitempty"`
	Unchanged    int64    `json:"unchanged,omitempty"`
	Deleted      int64    `json:"deleted,omitempty"`
	Skipped      []string `json:"skipped,omitempty"`
	// Error and Reason say why the volume's sync failed (empty: it did
	// not); its files are kept as they were.
	Error  string `json:"error,omitempty"`
	Reason string `json:"reason,omitempty"`
}
