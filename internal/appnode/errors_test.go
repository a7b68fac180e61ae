package appnode

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

// Every kind of domain error reaches a client with its code and the
// status apiv1.StatusOf gives it, whether the app-node meets it itself or
// the ork answers it over the fabric; every API code has a status.
func TestEveryKindMapsOnce(t *testing.T) {
	for _, code := range cosmic.Codes {
		want := apiv1.StatusOf(code)
		if want == http.StatusInternalServerError {
			t.Errorf("%s has no status of its own", code)
		}
		for name, err := range map[string]error{
			"domain":       fmt.Errorf("job j: %w", &cosmic.Kind{Code: code, Text: "x"}),
			"from the ork": fabric.Errorf(code, "job j: x"),
		} {
			status, body, internal := toHTTP(err)
			if status != want || body.Code != code || internal {
				t.Errorf("%s %s: %d %q (internal %v), want %d %q", name, code, status, body.Code, internal, want, code)
			}
		}
	}
	for _, c := range apiv1.Codes() {
		if s := apiv1.StatusOf(c); s < 400 || (s >= 500 && c != apiv1.CodeInternal && c != apiv1.CodeNotImplemented && c != apiv1.CodeUnavailable && c != apiv1.CodeTimeout) {
			t.Errorf("code %s: status %d", c, s)
		}
	}
}
