package apiv1

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/authz"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// OpenAPIVersion is the version of the OpenAPI specification the document follows.
const OpenAPIVersion = "3.1.0"

// enums gives the values of the named string types that have a fixed list.
var enums = map[reflect.Type][]string{
	reflect.TypeFor[cosmic.State]():       strs(cosmic.States),
	reflect.TypeFor[cosmic.JobType]():     {string(cosmic.TypeGPUContainer), string(cosmic.TypeManagedInference)},
	reflect.TypeFor[cosmic.Runtime]():     strs(cosmic.Runtimes),
	reflect.TypeFor[cosmic.Routing]():     strs(cosmic.Routings),
	reflect.TypeFor[cosmic.Role]():        {string(cosmic.RoleAdmin), string(cosmic.RoleMember), string(cosmic.RoleViewer)},
	reflect.TypeFor[cosmic.ModelHealth](): {string(cosmic.ModelHealthy), string(cosmic.ModelDegraded), string(cosmic.ModelUnhealthy), string(cosmic.ModelUnknown)},
	reflect.TypeFor[DataSyncDirection]():  strs(DataSyncDirections),
}

// patches adjust what reflection cannot see: custom decoding and fields
// that defaults fill in.
var patches = map[reflect.Type]func(s map[string]any){
	reflect.TypeFor[cosmic.Spec](): func(s map[string]any) {
		props := s["properties"].(map[string]any)
		props["region"] = map[string]any{"type": "string", "writeOnly": true,
			"description": "Alias of location, accepted on input; if both are given they must agree."}
		s["required"] = []string{"type", "location"}
		s["description"] = "A job spec. Fields left out are defaulted (see docs/jobs.md); unknown fields are refused."
	},
	reflect.TypeFor[cosmic.Resources](): func(s map[string]any) {
		delete(s, "required") // gpu is defaulted
	},
	reflect.TypeFor[cosmic.InferenceSpec](): func(s map[string]any) {
		delete(s, "required") // runtime and model are defaulted from each other
	},
	reflect.TypeFor[RegisterRack](): func(s map[string]any) {
		props := s["properties"].(map[string]any)
		props["workerKey"].(map[string]any)["pattern"] = "^[0-9a-f]{64}$"
		describe(props, "agentDeadline", "Seconds a replica placed or restarted on the rack may take until its agent connects, "+
			"then it fails with agent_timeout; 0 or absent: 600.")
		props["agentDeadline"].(map[string]any)["minimum"] = 0
		props["agentDeadline"].(map[string]any)["maximum"] = cosmic.MaxAgentDeadline
		props["placementPolicy"].(map[string]any)["enum"] = []string{cosmic.PolicyBestFit, cosmic.PolicyFGD}
		describe(props, "placementPolicy", "How the ork ranks the nodes of the rack's location (docs/placement.md); absent: the ork's default. "+
			"The racks of one location share one policy: another is a 409.")
	},
	reflect.TypeFor[Rack](): func(s map[string]any) {
		props := s["properties"].(map[string]any)
		describe(props, "agentDeadline", "The rack's agent deadline in seconds (the registration's, or the default 600).")
		props["placementPolicy"].(map[string]any)["enum"] = []string{cosmic.PolicyBestFit, cosmic.PolicyFGD}
	},
	reflect.TypeFor[cosmic.Status](): func(s map[string]any) {
		props := s["properties"].(map[string]any)
		describe(props, "timeoutAt", "When spec.timeout ends the current run (stopped with reason timeout, or restarted with timeoutAutoRestart); "+
			"set when the job enters running, absent otherwise.")
		describe(props, "agentDeadline", "The earliest of the replicas' agent deadlines; absent when none is set.")
	},
	reflect.TypeFor[cosmic.ReplicaStatus](): func(s map[string]any) {
		props := s["properties"].(map[string]any)
		describe(props, "agentDeadline", "When the replica fails with agent_timeout unless its agent connects (it runs) by then; "+
			"absent once it runs, or while it holds no GPUs.")
		describe(props, "progress", "The replica's last step reported while it starts.")
		describe(props, "given", "What the rack gave the replica, summed over its VMs (vCPUs, memory in MiB, GPUs passed through), "+
			"as its worker reports it: less than spec.resources asks where the rack caps a VM (a QEMU rack), with a note saying why.")
	},
}

// describe sets the description of property name.
func describe(props map[string]any, name, text string) {
	if p, ok := props[name].(map[string]any); ok {
		p["description"] = text
	}
}

func strs[S ~string](xs []S) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = string(x)
	}
	return out
}

// Schemas reflects Go types into JSON Schemas (OpenAPI 3.1 dialect): named
// structs become components referenced with $ref.
type Schemas struct {
	defs  map[string]any
	names map[reflect.Type]string
}

// NewSchemas returns an empty set of components.
func NewSchemas() *Schemas {
	return &Schemas{defs: map[string]any{}, names: map[reflect.Type]string{}}
}

// Components returns the component schemas collected so far, by name.
func (g *Schemas) Components() map[string]any { return g.defs }

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// Of returns the schema of t: a struct's json tags name its properties,
// fields without omitempty or omitzero are required, time.Time is a
// date-time string, json.RawMessage is any JSON value, maps are objects,
// slices arrays, pointers their element, and named string types with a
// known list of values enums.
func (g *Schemas) Of(t reflect.Type) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case rawType:
		return map[string]any{"description": "any JSON value"}
	}
	if vals, ok := enums[t]; ok {
		return map[string]any{"type": "string", "enum": vals}
	}
	switch t.Kind() {
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32:
		return map[string]any{"type": "integer"}
	case reflect.Int64, reflect.Uint64:
		return map[string]any{"type": "integer", "format": "int64"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string", "contentEncoding": "base64"}
		}
		return map[string]any{"type": "array", "items": g.Of(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.Of(t.Elem())}
	case reflect.Struct:
		if t.Name() == "" {
			return g.object(t)
		}
		return map[string]any{"$ref": "#/components/schemas/" + g.component(t)}
	case reflect.Interface:
		return map[string]any{}
	}
	panic(fmt.Sprintf("apiv1: no JSON schema for %s", t))
}

// component names t's schema, building it on first use. Two types of one
// name in different packages are told apart by their package's name.
func (g *Schemas) component(t reflect.Type) string {
	if n, ok := g.names[t]; ok {
		return n
	}
	name := t.Name()
	if _, taken := g.defs[name]; taken {
		pkg := t.PkgPath()
		name = strings.ToUpper(pkg[strings.LastIndexByte(pkg, '/')+1:][:1]) + pkg[strings.LastIndexByte(pkg, '/')+2:] + name
	}
	g.names[t] = name
	g.defs[name] = map[string]any{} // placeholder: recursive types refer to it
	s := g.object(t)
	if p, ok := patches[t]; ok {
		p(s)
	}
	g.defs[name] = s
	return name
}

func (g *Schemas) object(t reflect.Type) map[string]any {
	props := map[string]any{}
	var required []string
	g.fields(t, props, &required)
	s := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

func (g *Schemas) fields(t reflect.Type, props map[string]any, required *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, hasTag := f.Tag.Lookup("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" && opts == "" {
			continue
		}
		if f.Anonymous && !hasTag {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				g.fields(ft, props, required) // promoted fields, as encoding/json does
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		props[name] = g.Of(f.Type)
		optional := false
		for _, o := range strings.Split(opts, ",") {
			if o == "omitempty" || o == "omitzero" {
				optional = true
			}
		}
		if !optional {
			*required = append(*required, name)
		}
	}
}

// OpenAPI builds the OpenAPI 3.1 document of routes, as JSON. version is
// the server's release, shown as info.version.
func OpenAPI(routes []Route, version string) ([]byte, error) {
	g := NewSchemas()
	errRef := g.Of(reflect.TypeFor[ErrorResponse]())
	paths := map[string]any{}
	for _, r := range routes {
		item, _ := paths[r.Path].(map[string]any)
		if item == nil {
			item = map[string]any{}
			paths[r.Path] = item
		}
		op := map[string]any{
			"operationId": r.Op,
			"summary":     r.Summary,
			"tags":        []string{r.Tag},
		}
		if r.Description != "" {
			op["description"] = r.Description
		}
		if r.Perm == authz.Public {
			op["security"] = []any{}
		} else {
			// The permission names a row of docs/permissions.md.
			op["x-cosmicac-permission"] = string(r.Perm)
		}
		var params []any
		for _, p := range r.Params {
			s := g.Of(reflect.TypeOf(p.Type))
			if len(p.Enum) > 0 {
				s["enum"] = p.Enum
			}
			pm := map[string]any{"name": p.Name, "in": p.In, "schema": s, "required": p.Required}
			if p.Description != "" {
				pm["description"] = p.Description
			}
			if s["type"] == "array" {
				pm["style"], pm["explode"] = "form", true
			}
			params = append(params, pm)
		}
		if len(params) > 0 {
			op["parameters"] = params
		}
		if r.Request != nil {
			op["requestBody"] = map[string]any{
				"required": true,
				"content":  map[string]any{"application/json": map[string]any{"schema": g.Of(reflect.TypeOf(r.Request))}},
			}
		}
		ok := map[string]any{"description": http.StatusText(r.Status)}
		if r.Response != nil {
			ok["content"] = map[string]any{"application/json": map[string]any{"schema": g.Of(reflect.TypeOf(r.Response))}}
		}
		responses := map[string]any{strconv.Itoa(r.Status): ok}
		for _, s := range r.ErrorStatuses() {
			responses[strconv.Itoa(s)] = map[string]any{
				"description": http.StatusText(s),
				"content":     map[string]any{"application/json": map[string]any{"schema": errRef}},
			}
		}
		op["responses"] = responses
		item[strings.ToLower(r.Method)] = op
	}
	doc := map[string]any{
		"openapi": OpenAPIVersion,
		"info": map[string]any{
			"title":       "CosmicAC API",
			"version":     version,
			"description": "GPU jobs (KubeVirt GPU VMs) on the operator's Kubernetes cluster. Authenticate with `Authorization: Bearer TOKEN`. Errors are `{\"error\": {\"code\", \"message\", \"details\"}}`.",
		},
		"paths": paths,
		"components": map[string]any{
			"schemas": g.Components(),
			"securitySchemes": map[string]any{
				"bearerAuth": map[string]any{"type": "http", "scheme": "bearer", "description": "An API token (cac_...)"},
			},
		},
		"security": []any{map[string]any{"bearerAuth": []string{}}},
	}
	return json.MarshalIndent(doc, "", "  ")
}
