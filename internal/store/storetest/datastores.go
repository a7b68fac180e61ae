package storetest

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// testDatastores: datastores are a team's, by alias: created, listed by
// team (or all), got, their credentials replaced, deleted; an alias taken
// in the team is a conflict, another team may use it; an unknown team or
// a missing field is invalid; they survive a reopen and go with their
// team.
func testDatastores(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	ds, ok := s.(store.Datastores)
	if !ok {
		t.Skip("the store keeps no datastores")
	}
	for _, team := range []string{"a", "b"} {
		if err := s.CreateTeam(ctx, cosmic.Team{Name: team}); err != nil {
			t.Fatal(err)
		}
	}
	d1 := store.Datastore{Team: "a", Alias: "main", Type: "s3", Endpoint: "https://s3.example.net", Region: "eu-west-1",
		AccessKey: "AKIA1", SealedSecret: []byte{1, 2, 3}, CreatedBy: "ann", CreatedAt: at(0)}
	d2 := store.Datastore{Team: "b", Alias: "main", Type: "s3", Endpoint: "http://10.0.0.9:9000", Region: "us-east-1",
		AccessKey: "AKIA2", SealedSecret: []byte{4, 5}, CreatedBy: "bob", CreatedAt: at(1)}
	d3 := store.Datastore{Team: "a", Alias: "archive", Type: "s3", Endpoint: "https://s3.example.net", AccessKey: "AKIA3",
		SealedSecret: []byte{6}, CreatedBy: "ann", CreatedAt: at(2)}
	for _, d := range []store.Datastore{d1, d2, d3} {
		if err := ds.CreateDatastore(ctx, d); err != nil {
			t.Fatalf("CreateDatastore(%s/%s) = %v", d.Team, d.Alias, err)
		}
	}
	wantErr(t, "CreateDatastore(taken alias)", ds.CreateDatastore(ctx, d1), cosmic.ErrConflict)
	bad := d1
	bad.Team = "nope"
	wantErr(t, "CreateDatastore(unknown team)", ds.CreateDatastore(ctx, bad), cosmic.ErrInvalid)
	bad = d1
	bad.Alias, bad.SealedSecret = "other", nil
	wantErr(t, "CreateDatastore(no secret)", ds.CreateDatastore(ctx, bad), cosmic.ErrInvalid)

	l, err := ds.ListDatastores(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.Datastore{d3, d1}, l); diff != "" {
		t.Errorf("ListDatastores(a) (-want +got):\n%s", diff)
	}
	if l, _ := ds.ListDatastores(ctx, ""); len(l) != 3 || l[2].Team != "b" {
		t.Errorf("ListDatastores() = %+v, want every team's, by team", l)
	}
	got, err := ds.GetDatastore(ctx, "b", "main")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(d2, got); diff != "" {
		t.Errorf("GetDatastore(b, main) (-want +got):\n%s", diff)
	}
	_, err = ds.GetDatastore(ctx, "b", "archive")
	wantErr(t, "GetDatastore(another team's alias)", err, cosmic.ErrNotFound)

	upd, err := ds.SetDatastoreCredentials(ctx, "a", "main", "AKIA9", []byte{9, 9}, at(5))
	if err != nil {
		t.Fatal(err)
	}
	want := d1
	want.AccessKey, want.SealedSecret, want.UpdatedAt = "AKIA9", []byte{9, 9}, at(5)
	if diff := cmp.Diff(want, upd); diff != "" {
		t.Errorf("SetDatastoreCredentials (-want +got):\n%s", diff)
	}
	_, err = ds.SetDatastoreCredentials(ctx, "b", "archive", "x", []byte{1}, at(5))
	wantErr(t, "SetDatastoreCredentials(missing)", err, cosmic.ErrNotFound)
	if got, _ := ds.GetDatastore(ctx, "b", "main"); got.AccessKey != "AKIA2" {
		t.Errorf("another team's datastore of the same alias changed: %+v", got)
	}

	wantErr(t, "DeleteDatastore(missing)", ds.DeleteDatastore(ctx, "b", "archive"), cosmic.ErrNotFound)
	if err := ds.DeleteDatastore(ctx, "a", "archive"); err != nil {
		t.Fatal(err)
	}
	_, err = ds.GetDatastore(ctx, "a", "archive")
	wantErr(t, "GetDatastore(deleted)", err, cosmic.ErrNotFound)

	// A reopen keeps them; a team's deletion takes its datastores.
	s.Close()
	s = open(t)
	ds = s.(store.Datastores)
	if got, err := ds.GetDatastore(ctx, "a", "main"); err != nil || got.AccessKey != "AKIA9" {
		t.Fatalf("after a reopen: %+v, %v", got, err)
	}
	if err := s.DeleteTeam(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if l, _ := ds.ListDatastores(ctx, ""); len(l) != 1 || l[0].Team != "a" {
		t.Errorf("after team b's deletion: %+v", l)
	}
}
