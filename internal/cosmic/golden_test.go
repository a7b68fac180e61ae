package cosmic

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden JSON files in testdata/")

// TestGoldenJSON pins the JSON of a Job with every field set: the one
// shape that is the API's answer (apiv1.Job is cosmic.Job), the ork's
// fabric payload and the store's spec and status columns. A field
// renamed, retagged or removed changes this file: the API's clients, a
// peer of the previous version and the rows already stored read the old
// name, so such a change needs an API version note, and for the store a
// migration (docs/store.md). A new field fails the test too, until the
// file is rewritten (go test ./internal/cosmic -run GoldenJSON -update)
// and the change reviewed.
func TestGoldenJSON(t *testing.T) {
	var j Job
	fill(reflect.ValueOf(&j).Elem(), "")
	for _, tc := range []struct {
		name string
		v    any
	}{
		{"job.json", j},
		{"spec.json", j.Spec},     // the jobs.spec column
		{"status.json", j.Status}, // the jobs.status column
	} {
		got, err := json.MarshalIndent(tc.v, "", "  ")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got = append(got, '\n')
		path := filepath.Join("testdata", "golden", tc.name)
		if *update && tc.name != "job.json" {
			// The stored columns: a field that goes (renamed or removed) is
			// a new schema version with its upgrade (schema.go).
			if old, err := os.ReadFile(path); err == nil {
				gone := missingPaths(t, old, got)
				if len(gone) > 0 && JobSchemaVersion <= goldenSchemaVersion(t) {
					t.Fatalf("%s: %v renamed or removed: the stored rows have them; raise cosmic.JobSchemaVersion and add the upgrade of the older rows to jobUpgrades", tc.name, gone)
				}
			}
		}
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (write it with -update)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the JSON of %T changed (a field renamed, retagged, added or removed): if meant, rewrite it with -update, and migrate the stored rows for a rename\ngot:\n%s", tc.name, tc.v, got)
		}
		// And back: the golden file reads into the same value.
		back := reflect.New(reflect.TypeOf(tc.v))
		if err := json.Unmarshal(want, back.Interface()); err != nil {
			t.Fatalf("%s does not read back: %v", tc.name, err)
		}
		if again, _ := json.MarshalIndent(back.Elem().Interface(), "", "  "); !bytes.Equal(append(again, '\n'), want) {
			t.Errorf("%s does not round-trip:\n%s", tc.name, again)
		}
	}
	versionFile := filepath.Join("testdata", "golden", "schema-version")
	if *update {
		if err := os.WriteFile(versionFile, []byte(strconv.Itoa(JobSchemaVersion)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	} else if v := goldenSchemaVersion(t); v != JobSchemaVersion {
		t.Errorf("the golden files are of job schema version %d, cosmic.JobSchemaVersion is %d: rewrite them with -update", v, JobSchemaVersion)
	}
}

// goldenSchemaVersion is the JobSchemaVersion the golden files were
// written at.
func goldenSchemaVersion(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "golden", "schema-version"))
	if err != nil {
		t.Fatalf("%v (write it with -update)", err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// missingPaths are the paths of old's JSON (a.b, a[].c) that new lacks.
func missingPaths(t *testing.T, old, new []byte) []string {
	t.Helper()
	paths := func(b []byte) map[string]bool {
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		var walk func(v any, p string)
		walk = func(v any, p string) {
			switch v := v.(type) {
			case map[string]any:
				for k, e := range v {
					out[p+"."+k] = true
					walk(e, p+"."+k)
				}
			case []any:
				for _, e := range v {
					walk(e, p+"[]")
				}
			}
		}
		walk(v, "")
		return out
	}
	have := paths(new)
	var gone []string
	for p := range paths(old) {
		if !have[p] {
			gone = append(gone, p)
		}
	}
	slices.Sort(gone)
	return gone
}

// fill sets every field reachable from v to a value that is not its zero,
// named after its path where it is a string, so that every field shows in
// the JSON (omitempty included).
func fill(v reflect.Value, path string) {
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)))
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), path+"."+v.Type().Field(i).Name)
			}
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), path)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0), path+"[0]")
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k := reflect.New(v.Type().Key()).Elem()
		fill(k, path+".key")
		e := reflect.New(v.Type().Elem()).Elem()
		fill(e, path+"[key]")
		v.SetMapIndex(k, e)
	case reflect.String:
		v.SetString(path[1:])
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(len(path)))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(len(path)))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(0.5)
	case reflect.Interface:
		// none in the job's types today; a new one shows as null
	}
}
