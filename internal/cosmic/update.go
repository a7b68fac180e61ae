package cosmic

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// What an update of a serving job's spec may change (docs/inference.md,
// "Rolling updates"). Only a managed-inference job is updated; its type,
// name, location, resources, disk, runtime, served name and GPUs per
// replica are fixed at create (its place and its endpoint), and so is
// every other field not named here.
var (
	// rolledFields change what a replica runs: the replicas are replaced,
	// one at a time (a rollout).
	rolledFields = []string{"image", "envVars", "command", "inference.model", "inference.args", "inference.adapters"}
	// inPlaceFields change no replica: they take effect at once.
	inPlaceFields = []string{"labels", "inference.replicas", "inference.requireAuth", "inference.routing", "inference.autoscaling"}
)

// UpdateFields says what updating a job's spec from old to next changes:
// whether its replicas must be replaced (a rollout), and an error, a
// *FieldError (ErrInvalid) for each field that cannot change. Both specs
// are as stored (defaulted); next must also be valid on its own.
func UpdateFields(old, next Spec) (rollout bool, err error) {
	if old.Type != TypeManagedInference || old.Inference == nil {
		return false, fmt.Errorf("%w: only a managed-inference job's spec is updated (a %s job is created anew)", ErrConflict, old.Type)
	}
	a, b := flatSpec(old), flatSpec(next)
	var p problems
	for _, k := range slices.Sorted(keysOf(a, b)) {
		if reflect.DeepEqual(a[k], b[k]) {
			continue
		}
		switch {
		case slices.Contains(rolledFields, k):
			rollout = true
		case slices.Contains(inPlaceFields, k):
		default:
			p.add(k, "cannot change on an existing job (it is fixed at create; create a new job for it); what can: %s", strings.Join(append(slices.Clone(rolledFields), inPlaceFields...), ", "))
		}
	}
	return rollout, p.err()
}

// flatSpec is s as JSON, one level deep for the inference section.
func flatSpec(s Spec) map[string]any {
	var m map[string]any
	b, _ := json.Marshal(s)
	_ = json.Unmarshal(b, &m)
	if in, ok := m["inference"].(map[string]any); ok {
		delete(m, "inference")
		for k, v := range in {
			m["inference."+k] = v
		}
	}
	return m
}

func keysOf(ms ...map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		seen := map[string]bool{}
		for _, m := range ms {
			for k := range m {
				if !seen[k] {
					seen[k] = true
					if !yield(k) {
						return
					}
				}
			}
		}
	}
}
