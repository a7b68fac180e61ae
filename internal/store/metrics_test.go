package store_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
	"github.com/cosmicac/cosmicac/internal/store/sqlite"
)

// TestObservedCountsOperationsAndFailures: every operation of an observed
// store is timed under its name; a domain answer (not found) is no error,
// a failure of the database (closed) is.
func TestObservedCountsOperationsAndFailures(t *testing.T) {
	ctx := context.Background()
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	m := store.NewMetrics()
	o := store.Observe(s, "sqlite", m)
	if _, err := o.GetJob(ctx, "nope"); !errors.Is(err, cosmic.ErrNotFound) {
		t.Fatalf("GetJob(nope) = %v", err)
	}
	if err := o.CreateTeam(ctx, cosmic.Team{Name: "ml"}); err != nil {
		t.Fatal(err)
	}
	if err := o.Update(ctx, func(tx store.Tx) error { _, err := tx.Racks(ctx); return err }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := o.ListTeams(ctx); err == nil {
		t.Fatal("ListTeams on a closed store succeeded")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range mt.GetLabel() {
				key += " " + l.GetName() + "=" + l.GetValue()
			}
			if h := mt.GetHistogram(); h != nil {
				got[key] = float64(h.GetSampleCount())
			} else {
				got[key] = mt.GetCounter().GetValue()
			}
		}
	}
	want := map[string]float64{
		"cosmicac_store_op_duration_seconds op=get_job store=sqlite":     1,
		"cosmicac_store_op_duration_seconds op=create_team store=sqlite": 1,
		"cosmicac_store_op_duration_seconds op=update store=sqlite":      1,
		"cosmicac_store_op_duration_seconds op=list_teams store=sqlite":  1,
		"cosmicac_store_errors_total op=list_teams store=sqlite":         1,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}
