package storetest

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// testQuotas: quotas are set, replaced, listed by team and deleted; they
// name teams that need not exist, and survive a reopen.
func testQuotas(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	if got, err := s.ListQuotas(ctx, ""); err != nil || len(got) != 0 {
		t.Fatalf("ListQuotas(empty store) = %v, %v; want none", got, err)
	}
	const h100 = "GH100_H100_SXM5_80GB"
	ml := store.Quota{Team: "ml", Location: "us", GPUModel: h100, GPUs: 16, UpdatedAt: at(1), UpdatedBy: "admin"}
	mlAll := store.Quota{Team: "ml", Location: "us", GPUs: 24, UpdatedAt: at(2), UpdatedBy: "admin"}
	web := store.Quota{Team: "web", Location: "eu", GPUModel: h100, GPUs: 0, UpdatedAt: at(3)}
	for _, q := range []store.Quota{web, mlAll, ml} {
		if err := s.PutQuota(ctx, q); err != nil {
			t.Fatalf("PutQuota(%+v) = %v", q, err)
		}
	}
	list := func(team string, want ...store.Quota) {
		t.Helper()
		got, err := s.ListQuotas(ctx, team)
		if err != nil {
			t.Fatalf("ListQuotas(%q) = %v", team, err)
		}
		if want == nil {
			want = []store.Quota{}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("ListQuotas(%q) (-want +got):\n%s", team, diff)
		}
	}
	list("", mlAll, ml, web) // by team, location, model ("" first)
	list("ml", mlAll, ml)
	list("nobody")

	raised := ml
	raised.GPUs, raised.UpdatedAt, raised.UpdatedBy = 32, at(4), "root"
	if err := s.PutQuota(ctx, raised); err != nil {
		t.Fatalf("PutQuota(raise) = %v", err)
	}
	list("ml", mlAll, raised)

	for name, q := range map[string]store.Quota{
		"no team":       {Location: "us", GPUs: 1},
		"no location":   {Team: "ml", GPUs: 1},
		"negative GPUs": {Team: "ml", Location: "us", GPUs: -1},
	} {
		wantErr(t, "PutQuota("+name+")", s.PutQuota(ctx, q), cosmic.ErrInvalid)
	}

	if err := s.DeleteQuota(ctx, "ml", "us", ""); err != nil {
		t.Fatalf("DeleteQuota = %v", err)
	}
	wantErr(t, "DeleteQuota(twice)", s.DeleteQuota(ctx, "ml", "us", ""), cosmic.ErrNotFound)
	wantErr(t, "DeleteQuota(other model)", s.DeleteQuota(ctx, "web", "eu", "GB200"), cosmic.ErrNotFound)
	list("ml", raised)

	s.Close()
	s = open(t)
	list("", raised, web)
}
