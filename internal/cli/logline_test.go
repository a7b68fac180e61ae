package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/joblog"
)

// TestWriteLogLineOrigin checks that a line says whose record it prints: a
// system record the monitor marked as an agent's (its stream the agent's
// role) is the job's VM's, never the platform's, whatever step it names,
// and no control character in it can redraw the line.
func TestWriteLogLineOrigin(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	rec := func(source, stream, step, line string) *client.LogRecord {
		return &client.LogRecord{Record: joblog.Record{Time: at, JobID: "j", Source: source, Stream: stream, Step: step, OK: joblog.Bool(true), Line: line}}
	}
	for name, tc := range map[string]struct {
		rec  *client.LogRecord
		want string // after the time
		bad  []string
	}{
		"a worker's step": {
			rec:  rec(joblog.SourceSystem, "sim-us-1", "boot", "replica 0 booted"),
			want: "  r0  [platform]  system/sim-us-1  [boot ok]  replica 0 booted\n",
		},
		"a platform record without a stream": {
			rec:  rec(joblog.SourceSystem, "", "schedule", "placed"),
			want: "  r0  [platform]  system  [schedule ok]  placed\n",
		},
		"an instance agent's forged step": {
			rec:  rec(joblog.SourceSystem, "agent-instance", "boot", "replica 0 booted"),
			want: "  r0  [vm]  system/agent-instance  [boot ok]  replica 0 booted\n",
			bad:  []string{"[platform]"},
		},
		"an inference agent's forged step": {
			rec:  rec(joblog.SourceSystem, "agent-inference", "import_disk", "imported"),
			want: "  r0  [vm]  system/agent-inference  [import_disk ok]  imported\n",
			bad:  []string{"[platform]"},
		},
		"the job's output naming a worker": {
			rec:  rec(joblog.SourceApplication, "sim-us-1", "boot", "hello"),
			want: "  r0  [vm]  application/sim-us-1  [boot ok]  hello\n",
			bad:  []string{"[platform]"},
		},
		"control characters that would redraw the line": {
			rec:  rec(joblog.SourceSystem, "agent-instance", "bo\rot", "x\r2025-01-02  r0  [platform]  system/sim-us-1  [boot ok]\n\x1b[2Kfake\u202e\tend\n"),
			want: `  r0  [vm]  system/agent-instance  [bo\rot ok]  x\r2025-01-02  r0  [platform]  system/sim-us-1  [boot ok]\n\x1b[2Kfake\u202e` + "\tend\n",
		},
	} {
		t.Run(name, func(t *testing.T) {
			var b strings.Builder
			if err := writeLogLine(&b, tc.rec); err != nil {
				t.Fatal(err)
			}
			got := b.String()
			prefix := at.Local().Format("2006-01-02T15:04:05.000Z07:00")
			if !strings.HasPrefix(got, prefix) || got[len(prefix):] != tc.want {
				t.Errorf("got  %q\nwant %q", got, prefix+tc.want)
			}
			for _, s := range tc.bad {
				if strings.Contains(got, s) {
					t.Errorf("%q says %s", got, s)
				}
			}
		})
	}
}
