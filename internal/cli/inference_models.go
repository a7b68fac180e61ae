package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// modelRow is one model `inference models` lists.
type modelRow struct {
	Model    string             `json:"model"`
	Job      string             `json:"job"`
	JobName  string             `json:"jobName,omitempty"`
	Team     string             `json:"team"`
	State    cosmic.State       `json:"state,omitempty"`
	Health   cosmic.ModelHealth `json:"modelHealth,omitempty"`
	Replicas int                `json:"replicas,omitempty"`
	Auth     *bool              `json:"requireAuth,omitempty"` // nil: the endpoint does not say
}

// inferenceModelsCommand lists the models the caller reaches: with an API
// key, what /inference/v1/models answers that key (the endpoint's own
// view); without one, the Managed Inference Jobs of the caller's team (an
// admin's: every team's) that serve or will, with their state and health,
// through the jobs API and the login's token.
func (a *App) inferenceModelsCommand(f *inferCallFlags) *cobra.Command {
	var out outputFlag
	return withOutput(&cobra.Command{
		Use:   "models",
		Short: "List the models you can reach: by your API key, or your team's managed inference jobs",
		Example: "  cosmicac inference models\n" +
			"  COSMICAC_API_KEY=sk-cac-… cosmicac inference models -o json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			base, key, err := a.endpoint(f)
			if err != nil {
				return err
			}
			var rows []modelRow
			if key != "" {
				if rows, err = a.modelsOfKey(cmd, base, key); err != nil {
					return err
				}
			} else {
				c, err := a.connect(&connFlags{url: f.url})
				if err != nil {
					return err
				}
				// The models that serve, or will once placed and started.
				states := []cosmic.State{cosmic.StateQueued, cosmic.StatePending}
				for _, s := range cosmic.States {
					if s.RunsVMs() {
						states = append(states, s)
					}
				}
				jobs, err := c.listAll(cmd.Context(), client.ListOptions{States: states})
				if err != nil {
					return c.explain(err)
				}
				for _, j := range jobs {
					in := j.Spec.Inference
					if j.Spec.Type != cosmic.TypeManagedInference || in == nil {
						continue
					}
					name := in.ServedModelName
					if name == "" {
						name = in.Model
					}
					rows = append(rows, modelRow{Model: name, Job: j.ID, JobName: j.Spec.Name, Team: j.Team, State: j.Status.State,
						Health: j.Status.ModelHealth, Replicas: j.Spec.Replicas(), Auth: new(in.AuthRequired())})
				}
			}
			if rows == nil {
				rows = []modelRow{}
			}
			if ok, err := out.structured(a.Stdout, map[string]any{"items": rows, "endpoint": base}); ok {
				return err
			}
			if len(rows) == 0 {
				fmt.Fprintln(a.Stderr, "no models")
				return nil
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "MODEL\tJOB\tTEAM\tSTATE\tHEALTH\tREPLICAS\tAUTH")
			for _, r := range rows {
				auth := "-"
				switch {
				case r.Auth == nil:
				case *r.Auth:
					auth = "api key"
				default:
					auth = "none"
				}
				replicas := "-"
				if r.Replicas > 0 {
					replicas = strconv.Itoa(r.Replicas)
				}
				job := r.Job
				if r.JobName != "" {
					job = r.JobName
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Model, job, dash(r.Team), dash(string(r.State)), dash(string(r.Health)), replicas, auth)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(a.Stderr, "endpoint: %s (OpenAI-compatible; send the MODEL name)\n", base)
			return nil
		},
	}, &out)
}

// modelsOfKey asks the endpoint which models key reaches.
func (a *App) modelsOfKey(cmd *cobra.Command, base, key string) ([]modelRow, error) {
	req, err := http.NewRequestWithContext(cmd.Context(), http.MethodGet, base+"/models", nil)
	if err != nil {
		return nil, UsageErrorf("%v", err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, WithExit(ExitFailure, fmt.Errorf("cannot reach %s: %w", base, err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, inferenceError(resp, key)
	}
	var l struct {
		Data []struct {
			ID      string `json:"id"`
			OwnedBy string `json:"owned_by"`
			Job     string `json:"job"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return nil, WithExit(ExitFailure, fmt.Errorf("the model list from %s: %w", base, err))
	}
	rows := make([]modelRow, 0, len(l.Data))
	for _, m := range l.Data {
		rows = append(rows, modelRow{Model: m.ID, Job: m.Job, Team: m.OwnedBy})
	}
	return rows, nil
}
