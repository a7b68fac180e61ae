package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// apiKeyStore opens a store that keeps API keys, or skips the test.
func apiKeyStore(t *testing.T, open func(t *testing.T) store.Store) (store.Store, store.APIKeys) {
	t.Helper()
	s := open(t)
	ks, ok := s.(store.APIKeys)
	if !ok {
		t.Skip("the store keeps no API keys")
	}
	for _, team := range []string{"a", "b"} {
		if err := s.CreateTeam(context.Background(), cosmic.Team{Name: team}); err != nil {
			t.Fatal(err)
		}
	}
	return s, ks
}

func testAPIKeys(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	_, ks := apiKeyStore(t, open)
	k1 := store.APIKey{ID: "key_1", Name: "one", Team: "a", CreatedBy: "ann", Prefix: "sk-cac-ab", Hash: []byte("h1"), CreatedAt: at(0)}
	k2 := store.APIKey{ID: "key_2", Name: "two", Team: "b", CreatedBy: "bob", Prefix: "sk-cac-cd", Hash: []byte("h2"), CreatedAt: at(1),
		Models: []string{"qwen", "whisper"}, ExpiresAt: at(60), TokensPerMinute: 40000}
	for _, k := range []store.APIKey{k1, k2} {
		if err := ks.CreateAPIKey(ctx, k); err != nil {
			t.Fatalf("CreateAPIKey(%s) = %v", k.ID, err)
		}
	}
	wantErr(t, "CreateAPIKey(same hash)", ks.CreateAPIKey(ctx, store.APIKey{ID: "key_3", Name: "x", Team: "a", Hash: []byte("h1")}), cosmic.ErrConflict)
	wantErr(t, "CreateAPIKey(same ID)", ks.CreateAPIKey(ctx, store.APIKey{ID: "key_1", Name: "x", Team: "a", Hash: []byte("h9")}), cosmic.ErrConflict)
	wantErr(t, "CreateAPIKey(unknown team)", ks.CreateAPIKey(ctx, store.APIKey{ID: "key_4", Name: "x", Team: "nope", Hash: []byte("h4")}), cosmic.ErrInvalid)
	wantErr(t, "CreateAPIKey(no hash)", ks.CreateAPIKey(ctx, store.APIKey{ID: "key_5", Name: "x", Team: "a"}), cosmic.ErrInvalid)

	got, err := ks.APIKeyByHash(ctx, []byte("h2"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(k2, got); diff != "" {
		t.Errorf("APIKeyByHash(h2) (-want +got):\n%s", diff)
	}
	if got, err = ks.GetAPIKey(ctx, "key_1"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(k1, got); diff != "" {
		t.Errorf("GetAPIKey(key_1) (-want +got):\n%s", diff)
	}
	l, err := ks.ListAPIKeys(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.APIKey{k1, k2}, l); diff != "" {
		t.Errorf("ListAPIKeys() (-want +got):\n%s", diff)
	}
	if l, _ := ks.ListAPIKeys(ctx, "b"); len(l) != 1 || l[0].ID != "key_2" {
		t.Errorf("ListAPIKeys(b) = %+v", l)
	}

	// Touch writes at most once per store.TouchEvery.
	if err := ks.TouchAPIKey(ctx, "key_1", at(2)); err != nil {
		t.Fatal(err)
	}
	if err := ks.TouchAPIKey(ctx, "key_1", at(2).Add(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, _ := ks.GetAPIKey(ctx, "key_1"); !got.LastUsedAt.Equal(at(2)) {
		t.Errorf("LastUsedAt = %v, want %v (the touch 30 s later is not written)", got.LastUsedAt, at(2))
	}
	if err := ks.TouchAPIKey(ctx, "key_1", at(3)); err != nil {
		t.Fatal(err)
	}
	if got, _ := ks.GetAPIKey(ctx, "key_1"); !got.LastUsedAt.Equal(at(3)) {
		t.Errorf("LastUsedAt = %v, want %v", got.LastUsedAt, at(3))
	}
	if err := ks.TouchAPIKey(ctx, "key_nope", at(3)); err != nil {
		t.Errorf("TouchAPIKey(unknown) = %v, want nil", err)
	}

	if err := ks.DeleteAPIKey(ctx, "key_1"); err != nil {
		t.Fatal(err)
	}
	_, err = ks.APIKeyByHash(ctx, []byte("h1"))
	wantErr(t, "APIKeyByHash(revoked)", err, cosmic.ErrNotFound)
	_, err = ks.GetAPIKey(ctx, "key_1")
	wantErr(t, "GetAPIKey(revoked)", err, cosmic.ErrNotFound)
	wantErr(t, "DeleteAPIKey(twice)", ks.DeleteAPIKey(ctx, "key_1"), cosmic.ErrNotFound)
}

func testAPIKeyRotation(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	_, ks := apiKeyStore(t, open)
	k := store.APIKey{ID: "key_1", Name: "one", Team: "a", Prefix: "sk-cac-ab", Hash: []byte("h1"), CreatedAt: at(0), Models: []string{"qwen"}}
	if err := ks.CreateAPIKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if err := ks.CreateAPIKey(ctx, store.APIKey{ID: "key_2", Name: "two", Team: "a", Prefix: "sk-cac-zz", Hash: []byte("other"), CreatedAt: at(0)}); err != nil {
		t.Fatal(err)
	}
	got, err := ks.RotateAPIKey(ctx, "key_1", store.APIKeyRotation{Hash: []byte("h2"), Prefix: "sk-cac-cd", PreviousExpiresAt: at(70), At: at(10)})
	if err != nil {
		t.Fatal(err)
	}
	want := k
	want.Hash, want.Prefix, want.PreviousHash, want.PreviousExpiresAt, want.RotatedAt = []byte("h2"), "sk-cac-cd", []byte("h1"), at(70), at(10)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RotateAPIKey (-want +got):\n%s", diff)
	}
	for _, h := range []string{"h1", "h2"} {
		byHash, err := ks.APIKeyByHash(ctx, []byte(h))
		if err != nil {
			t.Fatalf("APIKeyByHash(%s) = %v", h, err)
		}
		if diff := cmp.Diff(want, byHash); diff != "" {
			t.Errorf("APIKeyByHash(%s) (-want +got):\n%s", h, diff)
		}
	}
	// The times are the caller's to check.
	for _, tt := range []struct {
		hash string
		now  time.Time
		want bool
	}{{"h2", at(100), true}, {"h1", at(69), true}, {"h1", at(70), false}, {"h3", at(11), false}} {
		if v := want.ValidFor([]byte(tt.hash), tt.now); v != tt.want {
			t.Errorf("ValidFor(%s, %v) = %v, want %v", tt.hash, tt.now, v, tt.want)
		}
	}
	// A second rotation drops the first secret at once.
	if _, err := ks.RotateAPIKey(ctx, "key_1", store.APIKeyRotation{Hash: []byte("h3"), Prefix: "sk-cac-ef", PreviousExpiresAt: at(80), At: at(20)}); err != nil {
		t.Fatal(err)
	}
	_, err = ks.APIKeyByHash(ctx, []byte("h1"))
	wantErr(t, "APIKeyByHash(secret rotated twice)", err, cosmic.ErrNotFound)
	if got, err := ks.APIKeyByHash(ctx, []byte("h2")); err != nil || string(got.Hash) != "h3" || !got.PreviousExpiresAt.Equal(at(80)) {
		t.Errorf("APIKeyByHash(h2) = %+v, %v; want the key with hash h3, previous until %v", got, err, at(80))
	}
	// Secrets stay unique across current and previous hashes.
	_, err = ks.RotateAPIKey(ctx, "key_1", store.APIKeyRotation{Hash: []byte("other"), At: at(30)})
	wantErr(t, "RotateAPIKey(another key's hash)", err, cosmic.ErrConflict)
	_, err = ks.RotateAPIKey(ctx, "key_2", store.APIKeyRotation{Hash: []byte("h2"), At: at(30)})
	wantErr(t, "RotateAPIKey(another key's previous hash)", err, cosmic.ErrConflict)
	wantErr(t, "CreateAPIKey(another key's previous hash)", ks.CreateAPIKey(ctx, store.APIKey{ID: "key_3", Name: "x", Team: "a", Hash: []byte("h2")}), cosmic.ErrConflict)
	_, err = ks.RotateAPIKey(ctx, "key_nope", store.APIKeyRotation{Hash: []byte("h9"), At: at(30)})
	wantErr(t, "RotateAPIKey(unknown)", err, cosmic.ErrNotFound)

	// Expiry is the caller's to check too, and ends the previous secret.
	exp := store.APIKey{Hash: []byte("h"), ExpiresAt: at(5), PreviousHash: []byte("p"), PreviousExpiresAt: at(9)}
	if exp.ValidFor([]byte("h"), at(5)) || exp.ValidFor([]byte("p"), at(6)) || !exp.ValidFor([]byte("p"), at(4)) {
		t.Error("ValidFor: an expired key must open with neither secret, an unexpired one with both")
	}
	if !want.Allows("qwen") || want.Allows("llama") || !(store.APIKey{}).Allows("llama") {
		t.Error("Allows: a key with models allows only those; one without, every model")
	}
}
