package cosmic

import (
	"errors"
	"fmt"
)

// JobSchemaVersion is the version of the JSON of Spec and Status as the
// store keeps them: the shape the API answers and the ork carries on the
// fabric too, pinned by testdata/golden (TestGoldenJSON). A field added is
// no new version: an older row reads as it is, the field at its zero. A
// field renamed, retyped or removed is a new version and a step of
// jobUpgrades that rewrites a row of the version before, so that the rows
// already stored are read as they were meant (docs/store.md, "Stored
// jobs").
const JobSchemaVersion = 1

// JobUpgrade rewrites the stored spec and status JSON of one version into
// the next.
type JobUpgrade func(spec, status []byte) (newSpec, newStatus []byte, err error)

// jobUpgrades[v] brings a row of version v to v+1. None yet: version 1 is
// the first.
var jobUpgrades = map[int]JobUpgrade{}

// ErrNewerJobSchema is a stored job of a version this binary does not know:
// written by a newer CosmicAC. It is refused, not misread.
var ErrNewerJobSchema = errors.New("stored by a newer CosmicAC")

// UpgradeJobJSON brings the spec and status JSON of a row stored at
// version v to JobSchemaVersion.
func UpgradeJobJSON(v int, spec, status []byte) ([]byte, []byte, error) {
	return upgradeJobJSON(v, JobSchemaVersion, jobUpgrades, spec, status)
}

func upgradeJobJSON(v, to int, steps map[int]JobUpgrade, spec, status []byte) ([]byte, []byte, error) {
	switch {
	case v > to:
		return nil, nil, fmt.Errorf("job schema version %d, this binary knows up to %d: %w", v, to, ErrNewerJobSchema)
	case v < 1:
		return nil, nil, fmt.Errorf("job schema version %d: %w", v, ErrInvalid)
	}
	for ; v < to; v++ {
		step, ok := steps[v]
		if !ok {
			return nil, nil, fmt.Errorf("job schema version %d: no upgrade to %d", v, v+1)
		}
		var err error
		if spec, status, err = step(spec, status); err != nil {
			return nil, nil, fmt.Errorf("upgrade job schema %d to %d: %w", v, v+1, err)
		}
	}
	return spec, status, nil
}
