package agentapi

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// TestCopyProgress: a replica's progress while its volumes come in is
// what moved of what the volumes' listings hold, over every volume; none
// once no volume is being copied.
func TestCopyProgress(t *testing.T) {
	for _, tc := range []struct {
		name string
		vols []VolumeStatus
		want *cosmic.Progress
	}{
		{"no volume", nil, nil},
		{"all in", []VolumeStatus{{Phase: VolumeReady, Objects: 2, Bytes: 10}}, nil},
		{"the first of two, listed", []VolumeStatus{{Phase: VolumePulling, Objects: 1, Bytes: 25, TotalObjects: 4, TotalBytes: 100}, {}},
			&cosmic.Progress{Step: cosmic.StepCopyVolumes, Percent: 25, Objects: 1, TotalObjects: 4, Bytes: 25, TotalBytes: 100}},
		{"the second, the first in", []VolumeStatus{{Phase: VolumeReady, Objects: 4, Bytes: 100, TotalObjects: 4, TotalBytes: 100}, {Phase: VolumePulling, Objects: 0, Bytes: 0, TotalObjects: 1, TotalBytes: 300}},
			&cosmic.Progress{Step: cosmic.StepCopyVolumes, Percent: 25, Objects: 4, TotalObjects: 5, Bytes: 100, TotalBytes: 400}},
		{"not listed yet", []VolumeStatus{{Phase: VolumePulling}}, &cosmic.Progress{Step: cosmic.StepCopyVolumes}},
	} {
		if diff := cmp.Diff(tc.want, CopyProgress(tc.vols)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}
