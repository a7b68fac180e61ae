package cosmic

import (
	"strings"
	"testing"
)

func TestCatalogueRefuses(t *testing.T) {
	qemu := Catalogue{Images: []string{"debian-12"}, JobTypes: []JobType{TypeGPUContainer}, MaxVMCPUs: 1, MaxVMMemoryMiB: 512}
	any := Catalogue{JobTypes: []JobType{TypeGPUContainer, TypeManagedInference}, Runtimes: []Runtime{RuntimeVLLM}}
	container := func(image string) Spec {
		s := Spec{Type: TypeGPUContainer, Image: image, Resources: Resources{GPU: 1}}
		s.Default()
		return s
	}
	inference := func(model string) Spec {
		s := Spec{Type: TypeManagedInference, Inference: &InferenceSpec{Model: model}}
		s.Default()
		return s
	}
	for name, c := range map[string]struct {
		cat   Catalogue
		spec  Spec
		asked Resources
		field string // "": runs it
	}{
		"defaults given up to a cap": {qemu, container("debian-12"), Resources{}, ""},
		"asked within the caps":      {qemu, container("debian-12"), Resources{CPU: 1}, ""},
		"image not in the catalogue": {qemu, container("ubuntu:24.04"), Resources{}, "image"},
		"job type not served":        {qemu, inference("m"), Resources{}, "type"},
		"vCPUs asked over the cap":   {qemu, container("debian-12"), Resources{CPU: 2}, "resources.cpu"},
		"memory asked over the cap":  {qemu, container("debian-12"), Resources{Memory: 1}, "resources.memory"},
		"any image":                  {any, container("ubuntu:24.04"), Resources{CPU: 64, Memory: 512}, ""},
		"runtime served":             {any, inference("m"), Resources{}, ""},
		"runtime not served":         {any, inference(ParakeetModel), Resources{}, "inference.runtime"},
		"default image of a runtime": {Catalogue{Images: []string{"x"}, JobTypes: []JobType{TypeManagedInference}, Runtimes: []Runtime{RuntimeVLLM}}, inference("m"), Resources{}, ""},
	} {
		r := c.cat.Refuses(c.spec, c.asked)
		switch {
		case c.field == "" && r != nil:
			t.Errorf("%s: refused on %s: %s", name, r.Field, r.Reason.Message)
		case c.field != "" && r == nil:
			t.Errorf("%s: not refused, want refused on %s", name, c.field)
		case c.field != "" && (r.Field != c.field || r.Reason.Code != ReasonNotInCatalogue || r.Reason.Fix == ""):
			t.Errorf("%s: refused %+v, want %s with not_in_catalogue and a fix", name, r, c.field)
		}
	}
}

// TestFixesNameWhatAMemberMayRun: the fixes a job's reason carries name
// `cosmicac locations` (any team member may run it), never `racks list`
// (platform admins only) without saying so.
func TestFixesNameWhatAMemberMayRun(t *testing.T) {
	for code, txt := range reasons {
		if strings.Contains(txt.fix, "racks list") && !strings.Contains(txt.fix, "platform admin") {
			t.Errorf("%s: the fix names `racks list`, which only platform admins may run: %s", code, txt.fix)
		}
	}
	for _, code := range []ReasonCode{ReasonNoSuchLocation, ReasonNoSuchGPUModel, ReasonExceedsNodeCPU, ReasonExceedsNodeMemory, ReasonNotInCatalogue, ReasonRackRefused} {
		if !strings.Contains(NewReason(code, "").Fix, "cosmicac locations") {
			t.Errorf("%s: the fix does not name `cosmicac locations`: %s", code, NewReason(code, "").Fix)
		}
	}
}
