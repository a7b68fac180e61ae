package apiv1

// Volume is a standalone volume of the team (docs/data.md, "Standalone
// volumes"): a disk a rack keeps, which a job mounts by naming it in
// spec.volumes[].volumeSource.standalone.name.
type Volume struct {
	Name string `json:"name"`
	Team string `json:"team"`
	// Rack keeps it: a job that mounts it runs there.
	Rack string `json:"rack"`
	// Bytes is what it takes on the rack's storage now; Size what it may
	// grow to (0: not known).
	Bytes int64 `json:"bytes"`
	Size  int64 `json:"size,omitempty"`
	// Job has it mounted now, if any: another job that mounts it waits
	// (volume_in_use) until that one stops.
	Job string `json:"job,omitempty"`
}

// VolumeList is the answer of GET /api/v1/volumes.
type VolumeList struct {
	Items []Volume `json:"items"`
	Total int      `json:"total"`
}
