package cosmic

import "testing"

// TestServedName: clients ask for servedModelName when the spec gives
// one, else the model id (as vLLM's --served-model-name defaults).
func TestServedName(t *testing.T) {
	for _, tc := range []struct {
		in   InferenceSpec
		want string
	}{
		{InferenceSpec{Model: "Qwen/Qwen3-0.6B"}, "Qwen/Qwen3-0.6B"},
		{InferenceSpec{Model: "Qwen/Qwen3-0.6B", ServedModelName: "qwen"}, "qwen"},
	} {
		if got := tc.in.ServedName(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.in, got, tc.want)
		}
	}
}
