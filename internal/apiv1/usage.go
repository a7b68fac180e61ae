package apiv1

import (
	"net/http"
	"time"

	"github.com/cosmicac/cosmicac/internal/authz"
)

// Operation ID of the inference usage.
const OpListUsage = "listUsage"

// The usage's query parameters (QueryTeam too).
const (
	QueryFrom    = "from"
	QueryTo      = "to"
	QueryGroupBy = "groupBy"
	QueryFormat  = "format"
)

// UsageItem is the inference usage of one group: the requests a team's
// API keys (or, without a key, callers of the team's open models) sent,
// and the tokens the engines counted. A field not grouped by is empty.
type UsageItem struct {
	// Start is the hour or day the item begins (grouped by time), UTC.
	Start            time.Time `json:"start,omitzero"`
	Team             string    `json:"team,omitempty"`
	KeyID            string    `json:"keyId,omitempty"`
	KeyName          string    `json:"keyName,omitempty"`
	Model            string    `json:"model,omitempty"`
	JobID            string    `json:"jobId,omitempty"`
	Requests         int64     `json:"requests"`
	PromptTokens     int64     `json:"promptTokens"`
	CompletionTokens int64     `json:"completionTokens"`
	TotalTokens      int64     `json:"totalTokens"`
	// GPUSeconds are the GPUs the jobs held × seconds, sampled by the ork
	// (divide by 3600 for GPU-hours).
	GPUSeconds int64 `json:"gpuSeconds"`
}

// UsageList is the usage of [from, to), grouped, with its total.
type UsageList struct {
	From    time.Time   `json:"from"`
	To      time.Time   `json:"to"`
	GroupBy []string    `json:"groupBy"`
	Items   []UsageItem `json:"items"`
	Total   UsageItem   `json:"total"`
}

func usageRoutes() []Route {
	return []Route{
		{Op: OpListUsage, Method: http.MethodGet, Path: Prefix + "/usage", Tag: "usage", Perm: authz.UsageRead, AllTeams: true,
			Summary: "The team's usage: inference requests and tokens, and the GPU-seconds its jobs held, by time, key, model and job (platform admins, with team *: every team)",
			Description: "What the engines counted in their answers (usage), summed by the minute as proxy-inference answered, " +
				"paid by the team of the API key (without one: the model's team); and the GPUs each job held, sampled by the ork " +
				"(on rows without a key). format=csv answers text/csv with a header line.",
			Params: []Param{
				{Name: QueryFrom, In: InQuery, Type: time.Time{}, Description: "From this time (RFC 3339, rounded down to the minute; default 30 days ago at 00:00 UTC)"},
				{Name: QueryTo, In: InQuery, Type: time.Time{}, Description: "Until this time (RFC 3339, exclusive; default now)"},
				{Name: QueryGroupBy, In: InQuery, Type: "", Description: "Comma-separated, any of hour or day, team, key, model, job (default day; none: the total only)"},
				{Name: QueryTeam, In: InQuery, Type: "", Description: "The team (as " + HeaderTeam + ")"},
				{Name: QueryFormat, In: InQuery, Type: "", Description: "json (default) or csv"},
			},
			Response: UsageList{}, Status: http.StatusOK},
	}
}
