package config

import (
	"encoding/json"
	"flag"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

var _ flag.Value = (*Duration)(nil)

func TestDurationUnmarshal(t *testing.T) {
	for _, tc := range []struct {
		in      string // JSON
		want    time.Duration
		wantErr string // a part of the error; "" for none
	}{
		{in: `"30s"`, want: 30 * time.Second},
		{in: `"1m30s"`, want: 90 * time.Second},
		{in: `"250ms"`, want: 250 * time.Millisecond},
		{in: `"1h"`, want: time.Hour},
		{in: `"0s"`, want: 0},
		{in: `"0"`, want: 0},
		{in: `"-5s"`, want: -5 * time.Second},
		{in: `"abc"`, wantErr: `duration "abc": want a number with a unit, e.g. "30s"`},
		{in: `"30"`, wantErr: `duration "30": want a number with a unit`},
		{in: `""`, wantErr: `duration "": want a number with a unit`},
		{in: `30000000000`, wantErr: `duration 30000000000: write a string with a unit, e.g. "30s"`},
		{in: `0`, wantErr: `write a string with a unit`},
		{in: `1.5`, wantErr: `write a string with a unit`},
		{in: `true`, wantErr: `write a string with a unit`},
		{in: `{}`, wantErr: `write a string with a unit`},
	} {
		var d Duration
		err := json.Unmarshal([]byte(tc.in), &d)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.in, err)
		case tc.wantErr == "" && d.D() != tc.want:
			t.Errorf("%s = %v, want %v", tc.in, d, tc.want)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v, want one containing %q", tc.in, err, tc.wantErr)
		}
	}
}

// TestDurationNullKeeps: null (an empty YAML value) leaves the default.
func TestDurationNullKeeps(t *testing.T) {
	d := Duration(time.Second)
	if err := json.Unmarshal([]byte(`null`), &d); err != nil || d.D() != time.Second {
		t.Fatalf("null: %v, %v; want 1s kept", d, err)
	}
}

func TestDurationRoundTrip(t *testing.T) {
	type file struct {
		Every Duration `json:"every"`
	}
	for _, d := range []time.Duration{0, time.Nanosecond, 250 * time.Millisecond, 90 * time.Second, 26*time.Hour + 3*time.Millisecond, -time.Minute} {
		b, err := json.Marshal(file{Every: Duration(d)})
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"every":"` + d.String() + `"}`; string(b) != want {
			t.Errorf("marshal %v = %s, want %s", d, b, want)
		}
		var back file
		if err := json.Unmarshal(b, &back); err != nil || back.Every.D() != d {
			t.Errorf("round trip of %v: %v, %v", d, back.Every, err)
		}
	}
}

// TestDurationYAML: through sigs.k8s.io/yaml, as the config files are read,
// a plain `30s` is a string and a plain `30` is refused.
func TestDurationYAML(t *testing.T) {
	type file struct {
		Every Duration `json:"every"`
	}
	var f file
	if err := yaml.UnmarshalStrict([]byte("every: 1m30s\n"), &f); err != nil || f.Every.D() != 90*time.Second {
		t.Fatalf("every: 1m30s = %v, %v", f.Every, err)
	}
	if err := yaml.UnmarshalStrict([]byte("every: 30\n"), &f); err == nil || !strings.Contains(err.Error(), `e.g. "30s"`) {
		t.Fatalf("every: 30: error %v, want a bare number refused", err)
	}
	b, err := yaml.Marshal(file{Every: Duration(30 * time.Second)})
	if err != nil || string(b) != "every: 30s\n" {
		t.Fatalf("marshal = %q, %v", b, err)
	}
}

func TestDurationFlag(t *testing.T) {
	d := Duration(time.Second)
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Var(&d, "every", "")
	if err := fs.Parse([]string{"--every", "2m"}); err != nil || d.D() != 2*time.Minute {
		t.Fatalf("--every 2m = %v, %v", d, err)
	}
	if d.Type() != "duration" {
		t.Fatalf("Type() = %q", d.Type())
	}
}
