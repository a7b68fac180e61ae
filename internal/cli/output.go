package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// Output formats of the read commands (-o).
const (
	outTable = "table"
	outJSON  = "json"
	outYAML  = "yaml"
)

// outputFlag is the -o flag.
type outputFlag struct{ format string }

func (o *outputFlag) add(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.format, "output", "o", outTable, "output format: table, json or yaml")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{outTable, outJSON, outYAML}, cobra.ShellCompDirectiveNoFileComp))
}

// check reports a format that is not one of the three (exit 2).
func (o *outputFlag) check() error {
	switch o.format {
	case outTable, outJSON, outYAML:
		return nil
	}
	return UsageErrorf("-o %q: want table, json or yaml", o.format)
}

// structured prints v as JSON or YAML and reports true, or reports false for
// the table format, which the caller prints itself.
func (o *outputFlag) structured(w io.Writer, v any) (bool, error) {
	switch o.format {
	case outJSON:
		return true, writeJSON(w, v)
	case outYAML:
		return true, writeYAML(w, v)
	}
	return false, nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func writeYAML(w io.Writer, v any) error {
	data, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

// timeNow is the clock for AGE columns.
var timeNow = time.Now

// age is a short, kubectl-like age: 45s, 12m, 5h, 3d.
func age(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := timeNow().Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < 2*time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < 2*time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	default:
		return strconv.Itoa(int(d/(24*time.Hour))) + "d"
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeJobsTable prints jobs as ID, NAME, TYPE, STATE, REASON, GPUS,
// LOCATION, AGE, USER; color paints the states (a terminal's).
func writeJobsTable(w io.Writer, jobs []cosmic.Job, color bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	state := "STATE"
	if color {
		state = paint("", state) // the column's cells are all painted: their widths agree
	}
	fmt.Fprintf(tw, "ID\tNAME\tTYPE\t%s\tREASON\tGPUS\tLOCATION\tAGE\tUSER\n", state)
	for _, j := range jobs {
		st := string(j.Status.State)
		if color {
			st = paint(stateColor(j.Status.State), st)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", j.ID, dash(j.Spec.Name), j.Spec.Type, st, reasonColumn(j),
			j.Spec.TotalGPUs(), dash(j.Spec.Location), age(j.CreatedAt), dash(j.User))
	}
	return tw.Flush()
}

// timeoutText says what spec.timeout does to the job: "1h0m0s, at TIME
// (12m3s left), then stopped", or only the timeout while no run is under
// way; "" without one.
func timeoutText(j cosmic.Job) string {
	if j.Spec.Timeout <= 0 {
		return ""
	}
	out := (time.Duration(j.Spec.Timeout) * time.Second).String()
	then := "stopped"
	if j.Spec.TimeoutAutoRestart {
		then = "restarted"
	}
	if t := j.Status.TimeoutAt; !t.IsZero() {
		return out + ", at " + t.Local().Format(time.RFC3339) + " (" + timeLeft(t) + "), then " + then
	}
	return out + " of running, then " + then
}

// timeLeft is the time until t, to the second: "12m3s left", or "due now".
func timeLeft(t time.Time) string {
	d := t.Sub(timeNow()).Round(time.Second)
	if d <= 0 {
		return "due now"
	}
	return d.String() + " left"
}

// waitText says what a queued job waits for: GPUs ("waiting for 8 ×
// H100 in us"), or its team's quota, which WaitingFor words in full.
func waitText(s cosmic.Status) string {
	if s.Reason != nil && s.Reason.Code == cosmic.ReasonTeamQuota {
		return string(cosmic.ReasonTeamQuota) + ": " + s.WaitingFor
	}
	return "waiting for " + s.WaitingFor
}

// reasonColumn says in a few words why a job is where it is: a queued
// job's place and what it waits for, a starting one's step, a failed
// one's reason code, a serving model's health when it is not healthy.
func reasonColumn(j cosmic.Job) string {
	s := j.Status
	switch s.State {
	case cosmic.StateQueued:
		return dash(strings.Join(queueParts(s, "#"), " "))
	case cosmic.StatePending, cosmic.StateStarting, cosmic.StateRestarting:
		if p := s.Progress; p != nil && p.Step != "" {
			if p.Percent > 0 {
				return p.Step + " " + strconv.Itoa(p.Percent) + "%"
			}
			return p.Step
		}
	case cosmic.StateRunning:
		if s.ModelHealth != "" && s.ModelHealth != cosmic.ModelHealthy {
			return "model " + string(s.ModelHealth)
		}
	}
	if s.Reason != nil && s.State != cosmic.StateRunning {
		return string(s.Reason.Code)
	}
	return "-"
}

// queueParts is what a queued job's status says of it: its place in the
// queue, after prefix ("#", "position "), and what it waits for.
func queueParts(s cosmic.Status, prefix string) []string {
	var parts []string
	if s.QueuePosition > 0 {
		parts = append(parts, prefix+strconv.Itoa(s.QueuePosition))
	}
	if s.WaitingFor != "" {
		parts = append(parts, waitText(s))
	}
	return parts
}

// The colors of states: ANSI codes of one length each, so that a painted
// column still lines up in a tabwriter (which counts the bytes).
const (
	colorNone   = "\x1b[39m"
	colorGreen  = "\x1b[32m"
	colorYellow = "\x1b[33m"
	colorRed    = "\x1b[31m"
	colorCyan   = "\x1b[36m"
	colorReset  = "\x1b[0m"
)

func stateColor(s cosmic.State) string {
	switch s {
	case cosmic.StateRunning:
		return colorGreen
	case cosmic.StateFailed:
		return colorRed
	case cosmic.StateDegraded, cosmic.StateUnknown, cosmic.StateRestarting:
		return colorYellow
	case cosmic.StateQueued, cosmic.StatePending, cosmic.StateStarting:
		return colorCyan
	}
	return colorNone
}

func paint(color, s string) string {
	if color == "" {
		color = colorNone
	}
	return color + s + colorReset
}

// writeJobDetail prints one job for people: its main fields, its status with
// reason and fix, its replicas and its status history; for a Managed
// Inference Job, its endpoint at apiURL, the model name clients ask for and
// whether a key is needed.
func writeJobDetail(w io.Writer, j cosmic.Job, apiURL string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	s := j.Spec
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("ID", j.ID)
	row("Name", s.Name)
	row("Type", string(s.Type))
	row("State", describeStatus(j.Status))
	if r := j.Status.Reason; r != nil {
		row("Reason", string(r.Code)+": "+r.Message)
		row("Fix", r.Fix)
	} else {
		row("Message", j.Status.Message)
	}
	if j.Status.ExitCode != nil {
		row("Exit code", strconv.Itoa(*j.Status.ExitCode))
	}
	row("Timeout", timeoutText(j))
	if d := j.Status.AgentDeadline; !d.IsZero() {
		row("Agent deadline", d.Local().Format(time.RFC3339)+" ("+timeLeft(d)+": fails with agent_timeout unless its agent connects)")
	}
	row("Location", s.Location)
	gpus := strconv.Itoa(s.TotalGPUs())
	if s.Resources.GPUModel != "" {
		gpus += " × " + s.Resources.GPUModel
	}
	row("GPUs", gpus)
	if s.Type == cosmic.TypeManagedInference && s.Inference != nil {
		in := s.Inference
		row("Runtime", string(in.Runtime))
		row("Model", in.Model)
		served := in.ServedModelName
		if served == "" {
			served = in.Model
		}
		row("Endpoint", apiURL+"/inference/v1 (model "+served+")")
		if in.AuthRequired() {
			row("Auth", "an API key of team "+j.Team+" (cosmicac api-keys create)")
		} else {
			row("Auth", "none: anyone who reaches the endpoint may call it")
		}
		row("Replicas", fmt.Sprintf("%d × %d GPUs", s.Replicas(), s.GPUsPerReplica()))
		routing := in.Routing
		if routing == "" {
			routing = cosmic.DefaultRouting
		}
		row("Routing", string(routing))
		if a := in.Autoscaling; a != nil {
			v := fmt.Sprintf("%d to %d replicas, %d requests per replica, scale down after %ds", a.MinReplicas, a.MaxReplicas, a.TargetInFlight, a.ScaleDownDelay)
			if s.Replicas() == 0 {
				v += " (at zero: the next request starts a replica)"
			}
			row("Autoscaling", v)
		}
		if j.Status.Generation > 0 || j.Status.Rollout != nil {
			row("Generation", strconv.Itoa(j.Status.Generation))
		}
		if j.Status.Rollout != nil {
			row("Rollout", describeRollout(j))
		}
		if lr := j.Status.LastRollout; lr != nil {
			v := fmt.Sprintf("generation %d %s at %s", lr.Generation, lr.Outcome, lr.Ended.Local().Format(time.DateTime))
			if lr.Reason != nil {
				v += ": " + lr.Reason.Message
			}
			row("Last rollout", v)
		}
		row("Model health", string(j.Status.ModelHealth))
	}
	row("Image", s.Image)
	if s.Resources.CPU != 0 || s.Resources.Memory != 0 || s.DiskGB != 0 {
		row("Resources", fmt.Sprintf("%d vCPU, %d GiB memory, %d GiB disk (asked; what each replica got: Replicas' GIVEN)", s.Resources.CPU, s.Resources.Memory, s.DiskGB))
	}
	if len(s.Command) > 0 {
		q := make([]string, len(s.Command))
		for i, c := range s.Command {
			q[i] = cosmic.ShellQuote(c)
		}
		row("Command", strings.Join(q, " "))
	}
	if len(s.Labels) > 0 {
		var ls []string
		for _, k := range sortedStrings(s.Labels) {
			ls = append(ls, k+"="+s.Labels[k])
		}
		row("Labels", strings.Join(ls, ","))
	}
	ref := j.ID // the commands take a name as an ID (names are unique in a team)
	if s.Name != "" {
		ref = s.Name
	}
	row("Actions", actionsText(ref, j.Status.Actions))
	row("User", j.User)
	row("Team", j.Team)
	if !j.CreatedAt.IsZero() {
		row("Created", j.CreatedAt.Local().Format(time.RFC3339)+" ("+age(j.CreatedAt)+" ago)")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(j.Status.Replicas) > 0 {
		fmt.Fprintln(w, "\nReplicas:")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  INDEX\tSTATE\tNODES\tGIVEN\tREASON")
		for _, r := range j.Status.Replicas {
			reason := "-"
			if r.Reason != nil {
				reason = string(r.Reason.Code)
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\n", r.Index, r.State, dash(strings.Join(r.Nodes, ",")), givenText(r.Given), reason)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, r := range j.Status.Replicas {
			if r.Given != nil && r.Given.Note != "" {
				fmt.Fprintf(w, "  replica %d got less than asked: %s\n", r.Index, r.Given.Note)
			}
		}
	}
	if len(j.Status.History) > 0 {
		fmt.Fprintln(w, "\nHistory:")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, h := range j.Status.History {
			extra := string(h.Reason)
			if h.Message != "" {
				extra = strings.TrimPrefix(extra+": "+h.Message, ": ")
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", h.At.Local().Format(time.RFC3339), h.State, extra)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// givenText is what a rack gave a replica: "1 vCPU, 0.5Gi, 0 GPUs" ("-":
// not reported).
func givenText(g *cosmic.Given) string {
	if g == nil {
		return "-"
	}
	return fmt.Sprintf("%d vCPU, %s, %d GPUs", g.CPUs, gib(g.MemoryMiB), g.GPUs)
}

// catalogueText says what a catalogue runs, in one line: "gpu-container
// jobs; images debian-12; a VM gets at most 1 vCPU and 0.5Gi".
func catalogueText(c *cosmic.Catalogue) string {
	if c == nil {
		return "not reported yet"
	}
	types := make([]string, len(c.JobTypes))
	for i, t := range c.JobTypes {
		types[i] = string(t)
	}
	parts := []string{strings.Join(types, ", ") + " jobs"}
	if len(c.Runtimes) > 0 {
		rs := make([]string, len(c.Runtimes))
		for i, r := range c.Runtimes {
			rs[i] = string(r)
		}
		parts = append(parts, "runtimes "+strings.Join(rs, ", "))
	}
	if len(c.Images) > 0 {
		parts = append(parts, "images "+strings.Join(c.Images, ", "))
	} else {
		parts = append(parts, "any image")
	}
	var caps []string
	if c.MaxVMCPUs > 0 {
		caps = append(caps, fmt.Sprintf("%d vCPU", c.MaxVMCPUs))
	}
	if c.MaxVMMemoryMiB > 0 {
		caps = append(caps, gib(c.MaxVMMemoryMiB))
	}
	if len(caps) > 0 {
		parts = append(parts, "a VM gets at most "+strings.Join(caps, " and "))
	}
	return strings.Join(parts, "; ")
}

// describeStatus is one line saying where a job stands, as --wait prints
// it: "queued (position 1: waiting for 8 × GH100_H100_SXM5_80GB in us)",
// "starting: import root disk 40%", "failed: import_failed".
func describeStatus(s cosmic.Status) string {
	out := string(s.State)
	switch s.State {
	case cosmic.StateQueued:
		if parts := queueParts(s, "position "); len(parts) > 0 {
			out += " (" + strings.Join(parts, ": ") + ")"
		}
	case cosmic.StateStarting, cosmic.StateRestarting, cosmic.StatePending:
		if p := s.Progress; p != nil && p.Step != "" {
			out += ": " + p.Step
			if p.Percent > 0 {
				out += " " + strconv.Itoa(p.Percent) + "%"
			}
		}
	case cosmic.StateFailed, cosmic.StateDegraded, cosmic.StateUnknown, cosmic.StateStopped:
		if s.Reason != nil {
			out += ": " + string(s.Reason.Code)
		}
	}
	return out
}

// rackRow is what the racks table shows of one rack.
type rackRow struct {
	ID, Location, GPUModel string
	Nodes, GPUs, Free      int
	Reachable              bool
	// Problem is what stops the rack from taking jobs, if anything.
	Problem *cosmic.Reason
	// Note is the worker's note on the rack's capacity.
	Note string
	// Catalogue is what the rack runs (nil: not reported).
	Catalogue *cosmic.Catalogue
}

// writeRacksTable prints racks as ID, LOCATION, GPU MODEL, NODES, GPUS, FREE,
// REACHABLE ("yes, unhealthy" for a rack with a problem), then each rack's
// problem and its fix.
func writeRacksTable(w io.Writer, racks []rackRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tLOCATION\tGPU MODEL\tNODES\tGPUS\tFREE\tREACHABLE")
	for _, r := range racks {
		reach := "no"
		switch {
		case r.Reachable && r.Problem != nil:
			reach = "yes, unhealthy"
		case r.Reachable:
			reach = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\n", r.ID, r.Location, r.GPUModel, r.Nodes, r.GPUs, r.Free, reach)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range racks {
		if r.Note != "" {
			fmt.Fprintf(w, "\nrack %s: %s\n", r.ID, r.Note)
		}
	}
	if slices.ContainsFunc(racks, func(r rackRow) bool { return r.Catalogue != nil }) {
		fmt.Fprintln(w)
		for _, r := range racks {
			fmt.Fprintf(w, "rack %s runs: %s\n", r.ID, catalogueText(r.Catalogue))
		}
	}
	for _, r := range racks {
		if r.Problem == nil {
			continue
		}
		fmt.Fprintf(w, "\nrack %s is unhealthy (%s): %s\n", r.ID, r.Problem.Code, r.Problem.Message)
		if r.Problem.Fix != "" {
			fmt.Fprintf(w, "  fix: %s\n", r.Problem.Fix)
		}
	}
	return nil
}

func sortedStrings[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// actionsText says what the caller may do to the job named ref now, as the
// API answered it (status.actions), as the commands that do it.
func actionsText(ref string, acts []cosmic.Action) string {
	var out []string
	for _, a := range acts {
		switch a {
		case cosmic.ActionRestart, cosmic.ActionKill, cosmic.ActionDelete:
			out = append(out, "cosmicac jobs "+string(a)+" "+ref)
		case cosmic.ActionForceDelete:
			out = append(out, "cosmicac jobs delete --force "+ref)
		}
	}
	return strings.Join(out, "; ")
}
