package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/httpserve"
	"github.com/cosmicac/cosmicac/internal/monitor"
	"github.com/cosmicac/cosmicac/internal/ork"
	"github.com/cosmicac/cosmicac/internal/simcluster"
)

// TestFileConfigsWriteDurationsAsStrings: no time.Duration of a component's
// config is left visible in its --config file (where it would be read as
// nanoseconds). Every time.Duration field, shadowed or not, is set to a
// sentinel: it must not show up in the file form.
func TestFileConfigsWriteDurationsAsStrings(t *testing.T) {
	const sentinel = 7777777777 * time.Nanosecond
	for _, cfg := range []any{
		&orkFileConfig{Ork: orkSectionOf(ork.DefaultConfig())},
		&appNodeFileConfig{API: appNodeSectionOf(appnode.DefaultConfig())},
		&simFileConfig{Rack: simSectionOf(simcluster.DefaultConfig())},
		&monitorFileConfig{Monitor: monitorSectionOf(monitor.DefaultConfig(""))},
		&directoryFileConfig{},
		&proxyInferenceFileConfig{},
		&k8sFileConfig{},
	} {
		setDurations(reflect.ValueOf(cfg).Elem(), sentinel)
		b, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "7777777777") {
			t.Errorf("%T has a time.Duration in its file form (nanoseconds): %s", cfg, b)
		}
	}
}

var durationType = reflect.TypeFor[time.Duration]()

// setDurations sets every settable time.Duration under v to d.
func setDurations(v reflect.Value, d time.Duration) {
	switch {
	case v.Type() == durationType:
		if v.CanSet() {
			v.SetInt(int64(d))
		}
	case v.Kind() == reflect.Struct:
		for i := range v.NumField() {
			setDurations(v.Field(i), d)
		}
	case v.Kind() == reflect.Pointer && !v.IsNil():
		setDurations(v.Elem(), d)
	}
}

// TestConfigFileDurations: durations in a component's --config file are
// strings like "30s" (and flags still override the file); a bare number is
// refused with a hint.
func TestConfigFileDurations(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	load := func(path string, cfg any, bind func(*cobra.Command), args ...string) error {
		cmd := &cobra.Command{Use: "x", SilenceUsage: true, SilenceErrors: true,
			RunE: func(cmd *cobra.Command, _ []string) error { return loadConfigFile(cmd, path, cfg) }}
		bind(cmd)
		cmd.SetArgs(args)
		return cmd.Execute()
	}

	oc := orkFileConfig{Ork: orkSectionOf(ork.DefaultConfig())}
	path := write("ork.yaml", "dataDir: /d\nork:\n  heartbeat: 30s\n  workerTimeout: 1m30s\n")
	if err := load(path, &oc, func(c *cobra.Command) { c.Flags().Var(&oc.Ork.Heartbeat, "heartbeat", "") }); err != nil {
		t.Fatal(err)
	}
	if got := oc.Ork.toConfig(); got.Heartbeat != 30*time.Second || got.WorkerTimeout != 90*time.Second {
		t.Fatalf("ork config = %+v, want heartbeat 30s, workerTimeout 1m30s", got)
	}
	if err := load(path, &oc, func(c *cobra.Command) { c.Flags().Var(&oc.Ork.Heartbeat, "heartbeat", "") }, "--heartbeat", "5s"); err != nil {
		t.Fatal(err)
	}
	if got := oc.Ork.toConfig().Heartbeat; got != 5*time.Second {
		t.Fatalf("heartbeat = %v, want 5s from the flag", got)
	}

	mon := monitorFileConfig{Monitor: monitorSectionOf(monitor.DefaultConfig(""))}
	path = write("monitor.yaml", "monitor:\n  jobIdle: 2h\n  loki:\n    url: http://loki:3100\n    batchWait: 250ms\n")
	if err := load(path, &mon, func(*cobra.Command) {}); err != nil {
		t.Fatal(err)
	}
	m := mon.Monitor.toConfig()
	if m.JobIdle != 2*time.Hour || m.Loki.BatchWait != 250*time.Millisecond || m.Loki.URL != "http://loki:3100" ||
		m.WriteTimeout != 10*time.Second || m.Loki.MaxBackoff != 30*time.Second {
		t.Fatalf("monitor config = %+v: want jobIdle 2h, loki.batchWait 250ms and the other defaults", m)
	}

	var proxy proxyInferenceFileConfig
	path = write("proxy.yaml", "proxy:\n  keyTTL: 3s\n  maxAttempts: 2\n")
	if err := load(path, &proxy, func(*cobra.Command) {}); err != nil {
		t.Fatal(err)
	}
	if p := proxy.Proxy.toConfig(); p.KeyTTL != 3*time.Second || p.MaxAttempts != 2 {
		t.Fatalf("proxy config = %+v, want keyTTL 3s, maxAttempts 2", p)
	}

	for name, content := range map[string]string{
		"bare.yaml":   "ork:\n  heartbeat: 30\n",
		"nanos.yaml":  "ork:\n  heartbeat: 2000000000\n",
		"nounit.yaml": "ork:\n  heartbeat: \"30\"\n",
	} {
		err := load(write(name, content), &orkFileConfig{}, func(*cobra.Command) {})
		if err == nil || !strings.Contains(err.Error(), `e.g. "30s"`) {
			t.Errorf("%s: error %v, want a bare number refused with a hint", name, err)
		}
	}
	// Through the real command: the error names the file.
	code, _, errs := runCLI(t, nil, "wrk-monitor", "--config", write("mon.yaml", "monitor:\n  jobIdle: 5\n"))
	if code != ExitUsage || !strings.Contains(errs, "mon.yaml") || !strings.Contains(errs, `e.g. "30s"`) {
		t.Fatalf("wrk-monitor with jobIdle: 5: exit %d, %q", code, errs)
	}
}

// TestHTTPSection: every component's file takes an http section of limits
// (durations as strings; left out: the defaults), and refuses a negative
// limit or an unknown field in it.
func TestHTTPSection(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, file, wantErr string
		want                httpserve.Limits
	}{
		{name: "set", file: "http:\n  body: 45s\n  upload: 10m\n  idle: 20s\n  maxHeaderBytes: 8192\n",
			want: httpserve.Limits{Body: 45 * time.Second, Upload: 10 * time.Minute, Idle: 20 * time.Second, MaxHeaderBytes: 8192}},
		{name: "absent", file: "dataDir: /d\n", want: httpserve.Limits{}},
		{name: "negative", file: "http:\n  idle: -1s\n", wantErr: "http.idle"},
		{name: "unknown", file: "http:\n  readTimeout: 1s\n", wantErr: "readTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".yaml")
			if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			var cfg monitorFileConfig
			cmd := &cobra.Command{Use: "x", SilenceUsage: true, SilenceErrors: true,
				RunE: func(cmd *cobra.Command, _ []string) error { return loadConfigFile(cmd, path, &cfg) }}
			err := cmd.Execute()
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("err %v, want one naming %s", err, tc.wantErr)
				}
			case err != nil:
				t.Error(err)
			case cfg.HTTP.toLimits() != tc.want:
				t.Errorf("limits %+v, want %+v", cfg.HTTP.toLimits(), tc.want)
			}
		})
	}
}
