package components

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/cli"
	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/gateway"
	"github.com/cosmicac/cosmicac/internal/httpserve"
	"github.com/cosmicac/cosmicac/internal/inferproxy"
	"github.com/cosmicac/cosmicac/internal/monitor"
	"github.com/cosmicac/cosmicac/internal/ork"
	"github.com/cosmicac/cosmicac/internal/simcluster"
)

// TestComponentFilesRoundTrip: every component's --config file, written
// from its defaults, reads back as the same config (one struct per
// component: file, flags and code), and writes no duration as a number
// (which would be nanoseconds): a time.Duration left in a config fails it.
func TestComponentFilesRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		cfg, fresh any
	}{
		{&orkFileConfig{Ork: ork.DefaultConfig()}, &orkFileConfig{}},
		{&appNodeFileConfig{API: appnode.DefaultConfig()}, &appNodeFileConfig{}},
		{&simFileConfig{Rack: simcluster.DefaultConfig()}, &simFileConfig{}},
		{&monitorFileConfig{Monitor: monitor.DefaultConfig("")}, &monitorFileConfig{}},
		{&directoryFileConfig{}, &directoryFileConfig{}},
		{&proxyInferenceFileConfig{Proxy: inferproxy.DefaultConfig()}, &proxyInferenceFileConfig{}},
		{&k8sFileConfig{}, &k8sFileConfig{}},
		{&gatewayFileConfig{Config: gateway.DefaultConfig()}, &gatewayFileConfig{}},
		{&qemuFileConfig{}, &qemuFileConfig{}},
	} {
		setDurations(reflect.ValueOf(tc.cfg).Elem(), 7777777777*time.Nanosecond)
		b, err := yaml.Marshal(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "7777777777") {
			t.Errorf("%T writes a duration as nanoseconds:\n%s", tc.cfg, b)
		}
		if err := yaml.UnmarshalStrict(b, tc.fresh); err != nil {
			t.Errorf("%T does not read its own file back: %v\n%s", tc.cfg, err, b)
			continue
		}
		again, err := yaml.Marshal(tc.fresh)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(string(b), string(again)); diff != "" {
			t.Errorf("%T round trip (-written +read and written again):\n%s", tc.cfg, diff)
		}
	}
}

// setDurations sets every settable duration under v (time.Duration or
// config.Duration) to d.
func setDurations(v reflect.Value, d time.Duration) {
	switch {
	case v.Kind() == reflect.Int64 && (v.Type() == reflect.TypeFor[time.Duration]() || v.Type() == reflect.TypeFor[config.Duration]()):
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

	oc := orkFileConfig{Ork: ork.DefaultConfig()}
	path := write("ork.yaml", "dataDir: /d\nork:\n  heartbeat: 30s\n  workerTimeout: 1m30s\n")
	if err := load(path, &oc, func(c *cobra.Command) { c.Flags().Var(&oc.Ork.Heartbeat, "heartbeat", "") }); err != nil {
		t.Fatal(err)
	}
	if got := oc.Ork; got.Heartbeat.D() != 30*time.Second || got.WorkerTimeout.D() != 90*time.Second {
		t.Fatalf("ork config = %+v, want heartbeat 30s, workerTimeout 1m30s", got)
	}
	if err := load(path, &oc, func(c *cobra.Command) { c.Flags().Var(&oc.Ork.Heartbeat, "heartbeat", "") }, "--heartbeat", "5s"); err != nil {
		t.Fatal(err)
	}
	if got := oc.Ork.Heartbeat.D(); got != 5*time.Second {
		t.Fatalf("heartbeat = %v, want 5s from the flag", got)
	}

	mon := monitorFileConfig{Monitor: monitor.DefaultConfig("")}
	path = write("monitor.yaml", "monitor:\n  jobIdle: 2h\n  loki:\n    url: http://loki:3100\n    batchWait: 250ms\n")
	if err := load(path, &mon, func(*cobra.Command) {}); err != nil {
		t.Fatal(err)
	}
	m := mon.Monitor
	if m.JobIdle.D() != 2*time.Hour || m.Loki.BatchWait.D() != 250*time.Millisecond || m.Loki.URL != "http://loki:3100" ||
		m.WriteTimeout.D() != 10*time.Second || m.Loki.MaxBackoff.D() != 30*time.Second {
		t.Fatalf("monitor config = %+v: want jobIdle 2h, loki.batchWait 250ms and the other defaults", m)
	}

	var proxy proxyInferenceFileConfig
	path = write("proxy.yaml", "proxy:\n  keyTTL: 3s\n  maxAttempts: 2\n")
	if err := load(path, &proxy, func(*cobra.Command) {}); err != nil {
		t.Fatal(err)
	}
	if p := proxy.Proxy; p.KeyTTL.D() != 3*time.Second || p.MaxAttempts != 2 {
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
	if code != cli.ExitUsage || !strings.Contains(errs, "mon.yaml") || !strings.Contains(errs, `e.g. "30s"`) {
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
			want: httpserve.Limits{Body: config.Duration(45 * time.Second), Upload: config.Duration(10 * time.Minute), Idle: config.Duration(20 * time.Second), MaxHeaderBytes: 8192}},
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
			case cfg.HTTP != tc.want:
				t.Errorf("limits %+v, want %+v", cfg.HTTP, tc.want)
			}
		})
	}
}
