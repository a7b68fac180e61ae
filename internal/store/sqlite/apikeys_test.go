package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

func TestAPIKeys(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, team := range []string{"a", "b"} {
		if err := s.CreateTeam(ctx, cosmic.Team{Name: team}); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	k1 := store.APIKey{ID: "key_1", Name: "one", Team: "a", CreatedBy: "admin", Prefix: "sk-cac-ab", Hash: []byte("h1"), CreatedAt: now}
	k2 := store.APIKey{ID: "key_2", Name: "two", Team: "b", CreatedBy: "admin", Prefix: "sk-cac-cd", Hash: []byte("h2"), CreatedAt: now.Add(time.Second)}
	for _, k := range []store.APIKey{k1, k2} {
		if err := s.CreateAPIKey(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateAPIKey(ctx, store.APIKey{ID: "key_3", Name: "x", Team: "a", Hash: []byte("h1")}); !errors.Is(err, cosmic.ErrConflict) {
		t.Fatalf("duplicate hash: %v", err)
	}
	if err := s.CreateAPIKey(ctx, store.APIKey{ID: "key_4", Name: "x", Team: "nope", Hash: []byte("h4")}); !errors.Is(err, cosmic.ErrInvalid) {
		t.Fatalf("unknown team: %v", err)
	}
	got, err := s.APIKeyByHash(ctx, []byte("h2"))
	if err != nil || got.ID != "key_2" || got.Team != "b" || !got.CreatedAt.Equal(k2.CreatedAt) {
		t.Fatalf("by hash: %+v %v", got, err)
	}
	if l, _ := s.ListAPIKeys(ctx, "a"); len(l) != 1 || l[0].ID != "key_1" {
		t.Fatalf("list a: %+v", l)
	}
	if l, _ := s.ListAPIKeys(ctx, ""); len(l) != 2 {
		t.Fatalf("list all: %+v", l)
	}
	if err := s.DeleteAPIKey(ctx, "key_1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.APIKeyByHash(ctx, []byte("h1")); !errors.Is(err, cosmic.ErrNotFound) {
		t.Fatalf("revoked key: %v", err)
	}
	if err := s.DeleteAPIKey(ctx, "key_1"); !errors.Is(err, cosmic.ErrNotFound) {
		t.Fatalf("revoke twice: %v", err)
	}
	if _, err := s.GetAPIKey(ctx, "key_2"); err != nil {
		t.Fatal(err)
	}
}
