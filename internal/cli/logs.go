package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/joblog"
	"github.com/cosmicac/cosmicac/internal/trust"
)

// envMonitorURL points `jobs logs` at a wrk-monitor that is not served at
// the API's address (cosmicac up serves both at one).
const envMonitorURL = "COSMICAC_MONITOR_URL"

func (a *App) jobsLogsCommand(conn *connFlags) *cobra.Command {
	var (
		follow     bool
		source     string
		replica    int
		since      string
		output     string
		monitorURL string
	)
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print a job's logs: each setup step and the job's output; --follow for live records",
		Long: "Print a job's log records, oldest first: the system records of each step of setting the job up\n" +
			"(and whether it succeeded) and the application output of its replicas. Each line says whose\n" +
			"record it is: [platform] for the platform's own, [vm] for what the job's VM wrote (its output,\n" +
			"and system records of its agent, which are not the platform's steps). With --since the\n" +
			"history comes from Loki when the platform has one, else from the monitor's short buffer (a\n" +
			"note on stderr says so). With --follow the command then prints records as they arrive until\n" +
			"interrupted; a dropped stream resumes where it stopped, printing no record twice.",
		Example: "  cosmicac jobs logs 3f2a\n" +
			"  cosmicac jobs logs 3f2a --follow --source application --replica 0\n" +
			"  cosmicac jobs logs 3f2a --since 1h -o json | jq .line",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobIDs(conn),
		RunE: func(cmd *cobra.Command, args []string) error {
			o := client.LogOptions{Follow: follow, Since: since}
			switch source {
			case "", joblog.SourceSystem, joblog.SourceApplication:
				o.Source = source
			default:
				return UsageErrorf("--source %q: want system or application", source)
			}
			if cmd.Flags().Changed("replica") {
				if replica < 0 {
					return UsageErrorf("--replica %d: want a replica index from 0", replica)
				}
				o.Replica = &replica
			}
			if since != "" {
				if _, err := parseWhen(since); err != nil {
					return UsageErrorf("--since: %v", err)
				}
			}
			if output != outTable && output != outJSON {
				return UsageErrorf("-o %q: want table or json (one record per line)", output)
			}
			o.MonitorURL = monitorURL
			if o.MonitorURL == "" {
				o.MonitorURL = a.Getenv(envMonitorURL)
			}
			return a.withAPI(conn, func(c *apiConn) error {
				id, err := c.resolveJobID(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				enc := json.NewEncoder(a.Stdout)
				noted := false
				err = c.JobLogs(cmd.Context(), id, o, func(ev client.LogEvent) error {
					switch ev.Type {
					case client.LogRecordEvent:
						if output == outJSON {
							return enc.Encode(ev.Record)
						}
						return writeLogLine(a.Stdout, ev.Record)
					case client.LogMetaEvent:
						if ev.Meta.Partial && !noted {
							noted = true
							fmt.Fprintln(a.Stderr, "note: no Loki is configured: older records than the monitor's buffer are not shown")
						}
					case client.LogWarningEvent:
						fmt.Fprintln(a.Stderr, "warning: "+ev.Message)
					case client.LogCutoffEvent:
						fmt.Fprintln(a.Stderr, "note: the monitor cut this stream off for reading too slowly; resuming")
					}
					return nil
				})
				return c.explain(err)
			})
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "print new records as they arrive, until interrupted")
	f.StringVar(&source, "source", "", "only system (setup steps) or application (the job's output) records")
	f.IntVar(&replica, "replica", 0, "only this replica's records")
	f.StringVar(&since, "since", "", "records from this long ago (1h) or this RFC 3339 time on")
	f.StringVarP(&output, "output", "o", outTable, "output format: table, or json (one record per line)")
	f.StringVar(&monitorURL, "monitor-url", "", "wrk-monitor's URL when not at the API's (default $"+envMonitorURL+")")
	_ = cmd.RegisterFlagCompletionFunc("source", cobra.FixedCompletions([]string{joblog.SourceSystem, joblog.SourceApplication}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{outTable, outJSON}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// writeLogLine prints a record as one line, saying first whose it is
// (platformRecord: "[platform]", else "[vm]", the job's own VM):
//
//	TIME  rREPLICA  [platform|vm]  SOURCE/STREAM  [STEP ok|FAILED]  LINE
//
// Control characters in what the record holds are printed escaped (\r,
// \x1b), so that no record can redraw its line or print a second one.
func writeLogLine(w io.Writer, r *client.LogRecord) error {
	var b strings.Builder
	b.WriteString(r.Time.Local().Format("2006-01-02T15:04:05.000Z07:00"))
	origin := "vm"
	if platformRecord(r.Record) {
		origin = "platform"
	}
	who := fmt.Sprintf("r%d", r.Replica)
	if r.Replica < 0 {
		who = "job" // the ork's records of the job as a whole (its autoscaler's)
	}
	fmt.Fprintf(&b, "  %s  [%s]  %s", who, origin, escapeControls(r.Source))
	if r.Stream != "" {
		b.WriteString("/" + escapeControls(r.Stream))
	}
	if r.Step != "" {
		res := ""
		if r.OK != nil {
			res = " ok"
			if !*r.OK {
				res = " FAILED"
			}
		}
		fmt.Fprintf(&b, "  [%s%s]", escapeControls(r.Step), res)
	}
	b.WriteString("  ")
	b.WriteString(escapeControls(strings.TrimRight(r.Line, "\n")))
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}

// platformRecord reports whether r is the platform's own: a system record
// not written by a job's agent. wrk-monitor sets the stream of every system
// record an agent's key writes to the agent's role (monitor.confine), so a
// step that a tenant's VM forges is told from the platform's by its stream;
// the job's output (application records) is never the platform's.
func platformRecord(r joblog.Record) bool {
	return r.Source == joblog.SourceSystem && !trust.Role(r.Stream).IsAgent()
}

// escapeControls writes control and bidirectional formatting characters
// but the tab as Go escapes.
func escapeControls(s string) string {
	if !strings.ContainsFunc(s, isControl) {
		return s
	}
	var b strings.Builder
	for _, c := range s {
		if isControl(c) {
			q := strconv.QuoteRuneToASCII(c)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

func isControl(c rune) bool {
	return c != '\t' && (unicode.IsControl(c) || unicode.Is(unicode.Bidi_Control, c))
}
