package apiv1_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/authz"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

func document(t *testing.T) map[string]any {
	t.Helper()
	b, err := apiv1.OpenAPI(apiv1.Routes(), "test")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("document is not JSON: %v", err)
	}
	return doc
}

func TestOpenAPIShape(t *testing.T) {
	doc := document(t)
	if doc["openapi"] != apiv1.OpenAPIVersion {
		t.Errorf("openapi = %v", doc["openapi"])
	}
	for _, k := range []string{"info", "paths", "components", "security"} {
		if doc[k] == nil {
			t.Errorf("missing top-level %q", k)
		}
	}
	info := doc["info"].(map[string]any)
	if info["title"] == "" || info["version"] != "test" {
		t.Errorf("info = %v", info)
	}
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	for _, name := range []string{"Job", "Spec", "Status", "JobList", "ErrorResponse", "Rack", "WhoAmI", "Command"} {
		if schemas[name] == nil {
			t.Errorf("missing component %s", name)
		}
	}
	// Every $ref points at a component.
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				name := strings.TrimPrefix(ref, "#/components/schemas/")
				if schemas[name] == nil {
					t.Errorf("dangling $ref %s", ref)
				}
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(doc)
}

func TestEveryRouteDocumented(t *testing.T) {
	doc := document(t)
	paths := doc["paths"].(map[string]any)
	ops := map[string]bool{}
	patterns := map[string]bool{}
	for _, r := range apiv1.Routes() {
		if ops[r.Op] || patterns[r.Pattern()] {
			t.Errorf("duplicate route %s %s", r.Op, r.Pattern())
		}
		ops[r.Op], patterns[r.Pattern()] = true, true
		item, ok := paths[r.Path].(map[string]any)
		if !ok {
			t.Errorf("%s: path %s not in document", r.Op, r.Path)
			continue
		}
		op, ok := item[strings.ToLower(r.Method)].(map[string]any)
		if !ok {
			t.Errorf("%s: %s not in document", r.Op, r.Pattern())
			continue
		}
		if op["operationId"] != r.Op {
			t.Errorf("%s: operationId %v", r.Op, op["operationId"])
		}
		responses := op["responses"].(map[string]any)
		if responses[strconv.Itoa(r.Status)] == nil {
			t.Errorf("%s: success status %d not documented", r.Op, r.Status)
		}
		if r.Perm != authz.Public && responses["401"] == nil {
			t.Errorf("%s: 401 not documented", r.Op)
		}
		for _, p := range r.Params {
			if p.In == apiv1.InPath && !strings.Contains(r.Path, "{"+p.Name+"}") {
				t.Errorf("%s: path param %s not in path", r.Op, p.Name)
			}
		}
		if !strings.HasPrefix(r.Path, apiv1.Prefix+"/") {
			t.Errorf("%s: path %s outside %s", r.Op, r.Path, apiv1.Prefix)
		}
	}
	n := 0
	for _, item := range paths {
		n += len(item.(map[string]any))
	}
	if n != len(apiv1.Routes()) {
		t.Errorf("document has %d operations, table %d", n, len(apiv1.Routes()))
	}
}

func TestSchemaOf(t *testing.T) {
	type inner struct {
		A string `json:"a"`
	}
	type embedded struct {
		E int `json:"e"`
	}
	type sample struct {
		embedded
		Name   string            `json:"name"`
		Opt    string            `json:"opt,omitempty"`
		Zero   time.Time         `json:"zero,omitzero"`
		When   time.Time         `json:"when"`
		Ptr    *inner            `json:"ptr,omitempty"`
		Labels map[string]string `json:"labels"`
		States []cosmic.State    `json:"states"`
		Raw    json.RawMessage   `json:"raw,omitempty"`
		Skip   string            `json:"-"`
		//lint:ignore U1000 the schema must leave unexported fields out
		private  int
		Untagged bool
	}
	g := apiv1.NewSchemas()
	ref := g.Of(reflect.TypeFor[sample]())
	if ref["$ref"] != "#/components/schemas/sample" {
		t.Fatalf("ref = %v", ref)
	}
	s := g.Components()["sample"].(map[string]any)
	props := s["properties"].(map[string]any)
	want := []string{"e", "name", "opt", "zero", "when", "ptr", "labels", "states", "raw", "Untagged"}
	if len(props) != len(want) {
		t.Errorf("properties = %v", props)
	}
	for _, k := range want {
		if props[k] == nil {
			t.Errorf("missing property %s", k)
		}
	}
	req := strings.Join(s["required"].([]string), ",")
	if req != "e,name,when,labels,states,Untagged" {
		t.Errorf("required = %s", req)
	}
	if f := props["when"].(map[string]any)["format"]; f != "date-time" {
		t.Errorf("time format = %v", f)
	}
	items := props["states"].(map[string]any)["items"].(map[string]any)
	if len(items["enum"].([]string)) != len(cosmic.States) {
		t.Errorf("states enum = %v", items)
	}
	if props["labels"].(map[string]any)["type"] != "object" {
		t.Errorf("labels = %v", props["labels"])
	}
}

func TestErrorStatuses(t *testing.T) {
	for _, r := range apiv1.Routes() {
		got := r.ErrorStatuses()
		if got[len(got)-1] >= 600 || got[0] < 400 {
			t.Errorf("%s: %v", r.Op, got)
		}
		if r.Op == apiv1.OpCreateJob {
			want := []int{400, 401, 403, 404, 409, 413, 429, 500, 503, 504} // 404: the active team is not the caller's; 429: the team creates too fast
			if !reflect.DeepEqual(got, want) {
				t.Errorf("create statuses = %v, want %v", got, want)
			}
		}
		if r.Op == apiv1.OpHealth && (len(got) != 1 || got[0] != http.StatusInternalServerError) {
			t.Errorf("health statuses = %v", got)
		}
	}
}
