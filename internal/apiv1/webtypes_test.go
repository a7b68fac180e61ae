package apiv1_test

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/cosmicac/cosmicac/internal/apiv1"
)

// webOpenAPI is the OpenAPI document the web interface's types are
// generated from (hack/webui.sh --check: openapi-typescript, then tsc
// over the files that say @ts-check).
const webOpenAPI = "../../web/types/openapi.json"

// TestWebTypesSourceIsCurrent: web/types/openapi.json is the document the
// app-node serves (its version aside), so the web interface is
// type-checked against the API as it is; after a change of the API,
// `go test ./internal/apiv1 -run TestWebTypesSourceIsCurrent -update`
// rewrites it, and hack/webui.sh --build the types.
func TestWebTypesSourceIsCurrent(t *testing.T) {
	b, err := apiv1.OpenAPI(apiv1.Routes(), "web")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		t.Fatal(err)
	}
	out.WriteByte('\n')
	if *update {
		if err := os.WriteFile(webOpenAPI, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(webOpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, out.Bytes()) {
		t.Fatalf("%s is not the API's OpenAPI document: run go test ./internal/apiv1 -run TestWebTypesSourceIsCurrent -update", webOpenAPI)
	}
}
