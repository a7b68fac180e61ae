package cosmictest

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/client"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// TestListFilterLimits: through the whole platform (the real store), a
// label selector of 70 terms, once SQLite's "at most 64 tables in a join"
// and a 500, is a 400 that states the limit; 16 terms, all matching a job,
// find it.
func TestListFilterLimits(t *testing.T) {
	e := NewEnv(t)
	labels := func(n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("k%d", i)] = "v"
		}
		return m
	}
	spec := Container("labelled", 1)
	spec.Labels = labels(apiv1.MaxLabelSelectorTerms)
	j := e.Create(spec)

	_, err := e.Client.ListJobs(e.Ctx, client.ListOptions{Labels: labels(70)})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Code != apiv1.CodeInvalid ||
		!strings.Contains(ae.Message, "more than 16") {
		t.Fatalf("70 label terms: %v, want a 400 stating the limit", err)
	}
	list, err := e.Client.ListJobs(e.Ctx, client.ListOptions{Labels: labels(apiv1.MaxLabelSelectorTerms),
		States: slices.Clone(cosmic.States)})
	if err != nil || list.Total != 1 || list.Items[0].ID != j.ID {
		t.Fatalf("16 label terms and every state: %+v (%v), want the job", list, err)
	}
}
