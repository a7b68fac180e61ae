package cosmic

import (
	"bytes"
	"errors"
	"testing"
)

// TestUpgradeJobJSON: a row is brought to the current version step by
// step, in order; a row of a newer version is refused as such, and a
// missing step is an error, never a row read as it is.
func TestUpgradeJobJSON(t *testing.T) {
	steps := map[int]JobUpgrade{
		1: func(spec, status []byte) ([]byte, []byte, error) {
			return bytes.ReplaceAll(spec, []byte(`"gpus"`), []byte(`"gpu"`)), status, nil
		},
		2: func(spec, status []byte) ([]byte, []byte, error) {
			return spec, bytes.ReplaceAll(status, []byte(`"phase"`), []byte(`"state"`)), nil
		},
	}
	spec, status, err := upgradeJobJSON(1, 3, steps, []byte(`{"gpus":1}`), []byte(`{"phase":"running"}`))
	if err != nil || string(spec) != `{"gpu":1}` || string(status) != `{"state":"running"}` {
		t.Errorf("from 1: %s %s %v", spec, status, err)
	}
	if spec, _, err := upgradeJobJSON(3, 3, steps, []byte(`{"gpus":1}`), nil); err != nil || string(spec) != `{"gpus":1}` {
		t.Errorf("at the current version the row is as stored: %s %v", spec, err)
	}
	if _, _, err := upgradeJobJSON(4, 3, steps, nil, nil); !errors.Is(err, ErrNewerJobSchema) {
		t.Errorf("a newer row: %v", err)
	}
	if _, _, err := upgradeJobJSON(0, 3, steps, nil, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("version 0: %v", err)
	}
	if _, _, err := upgradeJobJSON(1, 4, steps, nil, nil); err == nil {
		t.Error("a missing step (3 to 4) was not an error")
	}
	if _, _, err := UpgradeJobJSON(JobSchemaVersion, []byte(`{}`), []byte(`{}`)); err != nil {
		t.Errorf("the current version: %v", err)
	}
	for v := 1; v < JobSchemaVersion; v++ {
		if jobUpgrades[v] == nil {
			t.Errorf("no upgrade from job schema version %d", v)
		}
	}
}
