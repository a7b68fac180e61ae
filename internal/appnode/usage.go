package appnode

// The inference usage: GET /api/v1/usage, as JSON or CSV.

import (
	"encoding/csv"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// maxUsageRange bounds a usage query's span, and maxHourlyRange one
// grouped by the hour (its rows).
const (
	maxUsageRange  = 400 * 24 * time.Hour
	maxHourlyRange = 93 * 24 * time.Hour
)

// usageGroups are the groupBy names of the API, as the store has them.
var usageGroups = map[string]store.UsageGroup{"hour": store.GroupHour, "day": store.GroupDay, "team": store.GroupTeam,
	"key": store.GroupKey, "model": store.GroupModel, "job": store.GroupJob}

func (s *Server) listUsage(w http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	if s.usage == nil {
		return nil, errorf(http.StatusNotImplemented, apiv1.CodeNotImplemented, "this app-node keeps no inference usage")
	}
	v := r.URL.Query()
	var err error
	one := func(name string) (string, bool) {
		if len(v[name]) > 1 && err == nil {
			err = badRequest("%s is given more than once", name)
		}
		_, given := v[name]
		return v.Get(name), given
	}
	now := s.now().UTC()
	q := store.UsageQuery{Team: c.team, To: now, From: now.AddDate(0, 0, -30).Truncate(24 * time.Hour), GroupBy: []store.UsageGroup{store.GroupDay}}
	parseTime := func(name string, dst *time.Time) {
		if s, _ := one(name); s != "" && err == nil {
			t, perr := time.Parse(time.RFC3339Nano, s)
			if perr != nil {
				err = invalid(&cosmic.FieldError{Field: name, Message: fmt.Sprintf("%s: want an RFC 3339 time", clip(s))})
			}
			*dst = t.UTC()
		}
	}
	parseTime(apiv1.QueryFrom, &q.From)
	parseTime(apiv1.QueryTo, &q.To)
	if g, given := one(apiv1.QueryGroupBy); given && err == nil {
		q.GroupBy = nil
		for _, name := range strings.Split(g, ",") {
			if name = strings.TrimSpace(name); name == "" {
				continue
			}
			ug, ok := usageGroups[name]
			if !ok {
				err = invalid(&cosmic.FieldError{Field: apiv1.QueryGroupBy, Message: fmt.Sprintf("%q: want any of hour or day, team, key, model, job", clip(name))})
				break
			}
			q.GroupBy = append(q.GroupBy, ug)
		}
	}
	format, _ := one(apiv1.QueryFormat)
	if err != nil {
		return nil, err
	}
	if format != "" && format != "json" && format != "csv" {
		return nil, invalid(&cosmic.FieldError{Field: apiv1.QueryFormat, Message: fmt.Sprintf("%q: want json or csv", clip(format))})
	}
	if err := q.Validate(); err != nil {
		return nil, err // field errors: 400 invalid
	}
	switch span := q.To.Sub(q.From); {
	case span > maxUsageRange:
		return nil, invalid(&cosmic.FieldError{Field: apiv1.QueryFrom, Message: fmt.Sprintf("from and to are %v apart: at most 400 days", span.Round(time.Hour))})
	case span > maxHourlyRange && slices.Contains(q.GroupBy, store.GroupHour):
		return nil, invalid(&cosmic.FieldError{Field: apiv1.QueryGroupBy, Message: "by the hour, from and to are at most 93 days apart"})
	}
	rows, err := s.usage.ListUsage(r.Context(), q)
	if err != nil {
		if errors.Is(err, cosmic.ErrInvalid) {
			return nil, badRequest("%v", err)
		}
		return nil, fmt.Errorf("list usage: %w", err)
	}
	names := map[string]string{}
	if slices.Contains(q.GroupBy, store.GroupKey) && s.apiKeys != nil {
		keys, err := s.apiKeys.ListAPIKeys(r.Context(), c.team)
		if err != nil {
			return nil, fmt.Errorf("list usage: the keys' names: %w", err)
		}
		for _, k := range keys {
			names[k.ID] = k.Name
		}
	}
	out := apiv1.UsageList{From: q.From.Truncate(time.Minute), To: q.To, GroupBy: []string{}, Items: make([]apiv1.UsageItem, len(rows))}
	for _, g := range q.GroupBy {
		out.GroupBy = append(out.GroupBy, string(g))
	}
	for i, r := range rows {
		out.Items[i] = apiv1.UsageItem{Start: r.Start, Team: r.Team, KeyID: r.KeyID, KeyName: names[r.KeyID], Model: r.Model, JobID: r.JobID,
			Requests: r.Requests, PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens, TotalTokens: r.PromptTokens + r.CompletionTokens,
			GPUSeconds: r.GPUSeconds}
		out.Total.GPUSeconds += r.GPUSeconds
		out.Total.Requests += r.Requests
		out.Total.PromptTokens += r.PromptTokens
		out.Total.CompletionTokens += r.CompletionTokens
	}
	out.Total.TotalTokens = out.Total.PromptTokens + out.Total.CompletionTokens
	if format != "csv" {
		return out, nil
	}
	writeUsageCSV(w, out, c.team)
	return written{}, nil
}

// writeUsageCSV answers the usage as CSV: a header line, then a line per
// item, with the columns grouped by and the counts.
func writeUsageCSV(w http.ResponseWriter, u apiv1.UsageList, team string) {
	if team == "" {
		team = "all-teams"
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="cosmicac-usage-%s-%s-%s.csv"`,
		team, u.From.Format("20060102T1504Z"), u.To.Format("20060102T1504Z")))
	w.WriteHeader(http.StatusOK)
	cw := csv.NewWriter(w)
	var head []string
	for _, g := range u.GroupBy {
		switch g {
		case "hour", "day":
			head = append(head, "start")
		case "key":
			head = append(head, "key_id", "key_name")
		case "job":
			head = append(head, "job_id")
		default:
			head = append(head, g)
		}
	}
	cw.Write(append(head, "requests", "prompt_tokens", "completion_tokens", "total_tokens", "gpu_seconds"))
	for _, it := range u.Items {
		var rec []string
		for _, g := range u.GroupBy {
			switch g {
			case "hour", "day":
				rec = append(rec, it.Start.Format(time.RFC3339))
			case "team":
				rec = append(rec, it.Team)
			case "key":
				rec = append(rec, it.KeyID, it.KeyName)
			case "model":
				rec = append(rec, it.Model)
			case "job":
				rec = append(rec, it.JobID)
			}
		}
		for _, n := range []int64{it.Requests, it.PromptTokens, it.CompletionTokens, it.TotalTokens, it.GPUSeconds} {
			rec = append(rec, strconv.FormatInt(n, 10))
		}
		cw.Write(rec)
	}
	cw.Flush()
}
