package ork

import (
	"fmt"
	"testing"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/ork/orkapi"
	"github.com/cosmicac/cosmicac/internal/store"
)

// The ork answers each kind of domain error with its code on the wire.
func TestWireErrorKeepsTheCode(t *testing.T) {
	for _, code := range cosmic.Codes {
		err := wireError(fmt.Errorf("job j: %w", &cosmic.Kind{Code: code, Text: "x"}))
		if fabric.ErrorCode(err) != code {
			t.Errorf("%s: the wire says %q", code, fabric.ErrorCode(err))
		}
	}
	fe := wireError(&cosmic.FieldError{Field: "resources.gpu", Message: "must be positive"})
	var e *fabric.Error
	if fabric.ErrorCode(fe) != orkapi.CodeInvalid || !asFabric(fe, &e) || len(e.Details) == 0 {
		t.Errorf("a field error: %v, want invalid with details", fe)
	}
	// A deposed ork's refused write is unavailable (503, try again), not
	// an internal error.
	if err := wireError(fmt.Errorf("set quota: %w", store.ErrNotLeader)); fabric.ErrorCode(err) != fabric.CodeUnavailable {
		t.Errorf("not the leader: the wire says %q, want %q", fabric.ErrorCode(err), fabric.CodeUnavailable)
	}
}

func asFabric(err error, e **fabric.Error) bool {
	fe, ok := err.(*fabric.Error)
	*e = fe
	return ok
}
