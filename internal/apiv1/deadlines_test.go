package apiv1_test

import (
	"slices"
	"testing"
)

// TestOpenAPIShowsTheDeadlines checks that the document gives a job's
// status its deadlines as optional date-times, and a rack its agent
// deadline in seconds.
func TestOpenAPIShowsTheDeadlines(t *testing.T) {
	schemas := document(t)["components"].(map[string]any)["schemas"].(map[string]any)
	for _, c := range []struct{ schema, field, typ, format string }{
		{"Status", "timeoutAt", "string", "date-time"},
		{"Status", "agentDeadline", "string", "date-time"},
		{"ReplicaStatus", "agentDeadline", "string", "date-time"},
		{"Rack", "agentDeadline", "integer", ""},
		{"RegisterRack", "agentDeadline", "integer", ""},
	} {
		s := schemas[c.schema].(map[string]any)
		p, ok := s["properties"].(map[string]any)[c.field].(map[string]any)
		if !ok || p["type"] != c.typ || (c.format != "" && p["format"] != c.format) || p["description"] == nil {
			t.Errorf("%s.%s = %v, want a described %s %s", c.schema, c.field, p, c.typ, c.format)
		}
		req, _ := s["required"].([]any)
		if c.schema != "Rack" && slices.Contains(req, any(c.field)) {
			t.Errorf("%s.%s is required, want it optional", c.schema, c.field)
		}
	}
}
