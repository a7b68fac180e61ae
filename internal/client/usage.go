package client

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cosmicac/cosmicac/internal/apiv1"
)

// UsageQuery selects the inference usage of the client's team (team
// apiv1.AllTeams: every team's, platform admins): of [From, To) (zero: the
// server's defaults, the last 30 days), grouped by GroupBy (nil: by day;
// empty: the total only).
type UsageQuery struct {
	From, To time.Time
	GroupBy  []string
}

func (q UsageQuery) values() url.Values {
	v := url.Values{}
	if !q.From.IsZero() {
		v.Set(apiv1.QueryFrom, q.From.UTC().Format(time.RFC3339Nano))
	}
	if !q.To.IsZero() {
		v.Set(apiv1.QueryTo, q.To.UTC().Format(time.RFC3339Nano))
	}
	if q.GroupBy != nil {
		v.Set(apiv1.QueryGroupBy, strings.Join(q.GroupBy, ","))
	}
	return v
}

// Usage is the inference usage q selects.
func (c *Client) Usage(ctx context.Context, q UsageQuery) (apiv1.UsageList, error) {
	var out apiv1.UsageList
	err := c.do(ctx, http.MethodGet, "/usage", q.values(), nil, &out)
	return out, err
}

// UsageCSV is the inference usage q selects, as the server's CSV.
func (c *Client) UsageCSV(ctx context.Context, q UsageQuery) ([]byte, error) {
	v := q.values()
	v.Set(apiv1.QueryFormat, "csv")
	var out []byte
	err := c.do(ctx, http.MethodGet, "/usage", v, nil, &out)
	return out, err
}
