package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

func testTeamsUsers(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	for _, name := range []string{"zeta", "alpha"} {
		if err := s.CreateTeam(ctx, cosmic.Team{Name: name, CreatedAt: at(1)}); err != nil {
			t.Fatalf("CreateTeam(%s) = %v", name, err)
		}
	}
	wantErr(t, "CreateTeam(duplicate)", s.CreateTeam(ctx, cosmic.Team{Name: "zeta"}), cosmic.ErrConflict)
	wantErr(t, "CreateTeam(empty)", s.CreateTeam(ctx, cosmic.Team{}), cosmic.ErrInvalid)
	wantErr(t, "CreateTeam(bad name)", s.CreateTeam(ctx, cosmic.Team{Name: "Bad Name"}), cosmic.ErrInvalid)
	teams, err := s.ListTeams(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]cosmic.Team{{Name: "alpha", CreatedAt: at(1)}, {Name: "zeta", CreatedAt: at(1)}}, teams); diff != "" {
		t.Errorf("ListTeams (-want +got):\n%s", diff)
	}
	if got, err := s.GetTeam(ctx, "zeta"); err != nil || got.Name != "zeta" {
		t.Errorf("GetTeam(zeta) = %+v, %v", got, err)
	}
	_, err = s.GetTeam(ctx, "nope")
	wantErr(t, "GetTeam(missing)", err, cosmic.ErrNotFound)

	bob := cosmic.User{Name: "bob", CreatedAt: at(2)}
	ann := cosmic.User{Name: "ann", PlatformAdmin: true, CreatedAt: at(3), HasPassword: true}
	if err := s.CreateUser(ctx, bob, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateUser(ctx, ann, "$argon2id$v=19$m=1,t=1,p=1$c2FsdA$aGFzaA"); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "CreateUser(duplicate)", s.CreateUser(ctx, cosmic.User{Name: "bob"}, ""), cosmic.ErrConflict)
	wantErr(t, "CreateUser(empty)", s.CreateUser(ctx, cosmic.User{}, ""), cosmic.ErrInvalid)
	got, err := s.GetUser(ctx, "bob")
	if err != nil || got != bob {
		t.Errorf("GetUser(bob) = %+v, %v; want %+v", got, err, bob)
	}
	_, err = s.GetUser(ctx, "cy")
	wantErr(t, "GetUser(missing)", err, cosmic.ErrNotFound)
	users, err := s.ListUsers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]cosmic.User{ann, bob}, users); diff != "" {
		t.Errorf("ListUsers (-want +got):\n%s", diff)
	}

	if h, err := s.PasswordHash(ctx, "ann"); err != nil || h == "" {
		t.Errorf("PasswordHash(ann) = %q, %v", h, err)
	}
	if err := s.SetPassword(ctx, "bob", "$argon2id$x"); err != nil {
		t.Fatal(err)
	}
	if u, _ := s.GetUser(ctx, "bob"); !u.HasPassword {
		t.Error("bob has no password after SetPassword")
	}
	wantErr(t, "SetPassword(missing)", s.SetPassword(ctx, "cy", "x"), cosmic.ErrNotFound)

	// The last platform admin keeps the flag.
	wantErr(t, "SetPlatformAdmin(last, false)", s.SetPlatformAdmin(ctx, "ann", false), cosmic.ErrConflict)
	if err := s.SetPlatformAdmin(ctx, "bob", true); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPlatformAdmin(ctx, "ann", false); err != nil {
		t.Errorf("SetPlatformAdmin(ann, false) with bob an admin = %v", err)
	}
	wantErr(t, "SetPlatformAdmin(missing)", s.SetPlatformAdmin(ctx, "cy", true), cosmic.ErrNotFound)

	if err := s.DeleteUser(ctx, "ann"); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "DeleteUser(again)", s.DeleteUser(ctx, "ann"), cosmic.ErrNotFound)
}

func testMembers(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	for _, team := range []string{"ml", "web"} {
		if err := s.CreateTeam(ctx, cosmic.Team{Name: team}); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range []string{"ann", "bob"} {
		if err := s.CreateUser(ctx, cosmic.User{Name: u}, ""); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []cosmic.Member{{Team: "ml", User: "ann", Role: cosmic.RoleOwner}, {Team: "web", User: "ann", Role: cosmic.RoleViewer}, {Team: "ml", User: "bob", Role: cosmic.RoleMember}} {
		if err := s.PutMember(ctx, m); err != nil {
			t.Fatalf("PutMember(%+v) = %v", m, err)
		}
	}
	// A second put changes the role.
	if err := s.PutMember(ctx, cosmic.Member{Team: "ml", User: "bob", Role: cosmic.RoleAdmin}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "PutMember(bad role)", s.PutMember(ctx, cosmic.Member{Team: "ml", User: "bob", Role: "root"}), cosmic.ErrInvalid)
	wantErr(t, "PutMember(no user)", s.PutMember(ctx, cosmic.Member{Team: "ml", User: "cy", Role: cosmic.RoleViewer}), cosmic.ErrInvalid)
	wantErr(t, "PutMember(no team)", s.PutMember(ctx, cosmic.Member{Team: "nope", User: "bob", Role: cosmic.RoleViewer}), cosmic.ErrInvalid)
	ms, err := s.Members(ctx, "ml")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]cosmic.Member{{Team: "ml", User: "ann", Role: cosmic.RoleOwner}, {Team: "ml", User: "bob", Role: cosmic.RoleAdmin}}, ms); diff != "" {
		t.Errorf("Members(ml) (-want +got):\n%s", diff)
	}
	ms, err = s.Memberships(ctx, "ann")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]cosmic.Member{{Team: "ml", User: "ann", Role: cosmic.RoleOwner}, {Team: "web", User: "ann", Role: cosmic.RoleViewer}}, ms); diff != "" {
		t.Errorf("Memberships(ann) (-want +got):\n%s", diff)
	}
	// Credential reads a token with its user's teams, by team.
	if err := s.CreateToken(ctx, store.Token{ID: "ta", UserName: "ann", Hash: hash(9), CreatedAt: at(0)}); err != nil {
		t.Fatal(err)
	}
	if _, u, ms, err := s.Credential(ctx, hash(9), time.Now()); err != nil || u.Name != "ann" ||
		!cmp.Equal(ms, []cosmic.Member{{Team: "ml", User: "ann", Role: cosmic.RoleOwner}, {Team: "web", User: "ann", Role: cosmic.RoleViewer}}) {
		t.Errorf("Credential(ann's token) = %+v, %+v, %v", u, ms, err)
	}
	if _, _, ms, err := s.Credential(ctx, hash(9), time.Now()); err == nil && len(ms) == 0 {
		t.Error("Credential lost the memberships")
	}
	if err := s.CreateUser(ctx, cosmic.User{Name: "solo"}, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateToken(ctx, store.Token{ID: "ts", UserName: "solo", Hash: hash(8)}); err != nil {
		t.Fatal(err)
	}
	if _, _, ms, err := s.Credential(ctx, hash(8), time.Now()); err != nil || len(ms) != 0 {
		t.Errorf("Credential(a user of no team) = %+v, %v", ms, err)
	}
	// Leaving a team takes the tokens bound to it.
	bound := store.Token{ID: "tb", UserName: "ann", Hash: hash(1), Team: "web", Scope: "read", Selector: map[string]string{"app": "x"}, CreatedAt: at(0)}
	free := store.Token{ID: "tf", UserName: "ann", Hash: hash(2), CreatedAt: at(0)}
	for _, tok := range []store.Token{bound, free} {
		if err := s.CreateToken(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteMember(ctx, "web", "ann"); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "DeleteMember(again)", s.DeleteMember(ctx, "web", "ann"), cosmic.ErrNotFound)
	if _, err := s.GetToken(ctx, "tb"); err == nil {
		t.Error("the token bound to web outlived ann's membership")
	}
	if _, err := s.GetToken(ctx, "tf"); err != nil {
		t.Errorf("ann's unbound token: %v", err)
	}
	// Deleting a user takes their memberships and tokens.
	if err := s.DeleteUser(ctx, "ann"); err != nil {
		t.Fatal(err)
	}
	if ms, _ := s.Members(ctx, "ml"); len(ms) != 1 {
		t.Errorf("Members(ml) after deleting ann = %+v", ms)
	}
	if _, err := s.GetToken(ctx, "tf"); err == nil {
		t.Error("ann's token outlived her")
	}
}

func hash(b byte) []byte { return slices.Repeat([]byte{b}, 32) }

func testTokens(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	if err := s.CreateTeam(ctx, cosmic.Team{Name: "t1"}); err != nil {
		t.Fatal(err)
	}
	bob := cosmic.User{Name: "bob"}
	if err := s.CreateUser(ctx, bob, ""); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	never := store.Token{ID: "tok1", Kind: store.KindToken, Name: "laptop", UserName: "bob", Hash: hash(1), CreatedAt: at(0)}
	later := store.Token{ID: "tok2", Kind: store.KindToken, Name: "ci", UserName: "bob", Hash: hash(2), CreatedAt: at(1), ExpiresAt: now.Add(time.Hour),
		Team: "t1", Scope: "operator", Selector: map[string]string{"app": "ci", "env": "test"}}
	expired := store.Token{ID: "tok3", Kind: store.KindToken, Name: "old", UserName: "bob", Hash: hash(3), CreatedAt: at(2), ExpiresAt: now.Add(-time.Second)}
	session := store.Token{ID: "ses1", Kind: store.KindSession, UserName: "bob", Hash: hash(4), CSRF: hash(5), CreatedAt: at(3), ExpiresAt: now.Add(time.Hour)}
	for _, tok := range []store.Token{never, later, expired, session} {
		if err := s.CreateToken(ctx, tok); err != nil {
			t.Fatalf("CreateToken(%s) = %v", tok.ID, err)
		}
	}
	for name, tt := range map[string]struct {
		tok  store.Token
		want error
	}{
		"duplicate ID":   {store.Token{ID: "tok1", UserName: "bob", Hash: hash(9)}, cosmic.ErrConflict},
		"duplicate hash": {store.Token{ID: "tok9", UserName: "bob", Hash: hash(1)}, cosmic.ErrConflict},
		"unknown user":   {store.Token{ID: "tok9", UserName: "cy", Hash: hash(9)}, cosmic.ErrInvalid},
		"no hash":        {store.Token{ID: "tok9", UserName: "bob"}, cosmic.ErrInvalid},
		"no ID":          {store.Token{UserName: "bob", Hash: hash(9)}, cosmic.ErrInvalid},
	} {
		wantErr(t, "CreateToken("+name+")", s.CreateToken(ctx, tt.tok), tt.want)
	}
	for _, want := range []store.Token{never, later, session} {
		tok, u, err := s.TokenByHash(ctx, want.Hash, now)
		if err != nil {
			t.Fatalf("TokenByHash(%s) = %v", want.ID, err)
		}
		if u != bob {
			t.Errorf("TokenByHash(%s) user = %+v", want.ID, u)
		}
		if diff := cmp.Diff(want, tok); diff != "" {
			t.Errorf("TokenByHash(%s) token (-want +got):\n%s", want.ID, diff)
		}
	}
	_, _, err := s.TokenByHash(ctx, later.Hash, later.ExpiresAt)
	wantErr(t, "TokenByHash(at its expiry)", err, cosmic.ErrNotFound)
	_, _, err = s.TokenByHash(ctx, expired.Hash, now)
	wantErr(t, "TokenByHash(expired)", err, cosmic.ErrNotFound)
	_, _, err = s.TokenByHash(ctx, hash(7), now)
	wantErr(t, "TokenByHash(unknown)", err, cosmic.ErrNotFound)

	toks, err := s.ListTokens(ctx, "bob", store.KindToken)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.Token{never, later, expired}, toks); diff != "" {
		t.Errorf("ListTokens(bob, token) (-want +got):\n%s", diff)
	}
	if ses, _ := s.ListTokens(ctx, "bob", store.KindSession); len(ses) != 1 || ses[0].ID != "ses1" {
		t.Errorf("ListTokens(bob, session) = %+v", ses)
	}

	// TouchToken keeps the latest use only.
	if err := s.TouchToken(ctx, "tok1", at(10)); err != nil {
		t.Fatal(err)
	}
	if err := s.TouchToken(ctx, "tok1", at(5)); err != nil {
		t.Fatal(err)
	}
	if tok, err := s.GetToken(ctx, "tok1"); err != nil || !tok.LastUsedAt.Equal(at(10)) {
		t.Errorf("GetToken(tok1) after touches = %v, %v; want last use %v", tok.LastUsedAt, err, at(10))
	}

	if err := s.DeleteToken(ctx, "tok1"); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.TokenByHash(ctx, never.Hash, now)
	wantErr(t, "TokenByHash(deleted)", err, cosmic.ErrNotFound)
	wantErr(t, "DeleteToken(deleted)", s.DeleteToken(ctx, "tok1"), cosmic.ErrNotFound)
	_, err = s.GetToken(ctx, "tok1")
	wantErr(t, "GetToken(deleted)", err, cosmic.ErrNotFound)
}

func testSessionsEnd(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	if err := s.CreateUser(ctx, cosmic.User{Name: "bob"}, "old"); err != nil {
		t.Fatal(err)
	}
	for i, kind := range []store.TokenKind{store.KindSession, store.KindToken} {
		if err := s.CreateToken(ctx, store.Token{ID: string(kind), Kind: kind, UserName: "bob", Hash: hash(byte(i + 1))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetPassword(ctx, "bob", "new"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetToken(ctx, "session"); err == nil {
		t.Error("a session outlived a new password")
	}
	if _, err := s.GetToken(ctx, "token"); err != nil {
		t.Errorf("a personal token did not outlive a new password: %v", err)
	}
}

func testDeleteTeam(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	for _, team := range []string{"t1", "t2"} {
		if err := s.CreateTeam(ctx, cosmic.Team{Name: team}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateUser(ctx, cosmic.User{Name: "bob"}, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.PutMember(ctx, cosmic.Member{Team: "t2", User: "bob", Role: cosmic.RoleOwner}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateToken(ctx, store.Token{ID: "tb", UserName: "bob", Hash: hash(1), Team: "t2"}); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, job("j1", "t1", "bob", cosmic.StateQueued, "a", nil, 0, 0))
	wantErr(t, "DeleteTeam(with jobs)", s.DeleteTeam(ctx, "t1"), cosmic.ErrConflict)
	if err := s.DeleteTeam(ctx, "t2"); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "DeleteTeam(again)", s.DeleteTeam(ctx, "t2"), cosmic.ErrNotFound)
	if ms, _ := s.Memberships(ctx, "bob"); len(ms) != 0 {
		t.Errorf("bob is still in %+v", ms)
	}
	if _, err := s.GetToken(ctx, "tb"); err == nil {
		t.Error("a token bound to the deleted team lives on")
	}
}

func testAudit(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	var want []store.AuditRecord
	for i := range 10 {
		r := store.AuditRecord{At: at(i), User: []string{"ann", "bob"}[i%2], Team: []string{"ml", "web", ""}[i%3],
			Action: []string{"createJob", "deleteJob"}[i/5], Target: fmt.Sprint("j", i), Remote: "192.0.2.1:5", Status: 201, Detail: ""}
		if err := s.AppendAudit(ctx, r); err != nil {
			t.Fatal(err)
		}
		want = append(want, r)
	}
	got, more, err := s.ListAudit(ctx, store.AuditQuery{})
	if err != nil || more || len(got) != 10 {
		t.Fatalf("ListAudit() = %d records, more %v, %v", len(got), more, err)
	}
	for i, r := range got { // newest first
		w := want[9-i]
		w.ID = r.ID
		if r != w {
			t.Errorf("record %d = %+v, want %+v", i, r, w)
		}
		if i > 0 && r.ID >= got[i-1].ID {
			t.Errorf("IDs not descending: %d after %d", r.ID, got[i-1].ID)
		}
	}
	count := func(q store.AuditQuery) int {
		t.Helper()
		rs, _, err := s.ListAudit(ctx, q)
		if err != nil {
			t.Fatalf("ListAudit(%+v) = %v", q, err)
		}
		return len(rs)
	}
	for name, tt := range map[string]struct {
		q    store.AuditQuery
		want int
	}{
		"user":          {store.AuditQuery{User: "ann"}, 5},
		"team":          {store.AuditQuery{Team: "ml"}, 4},
		"action":        {store.AuditQuery{Action: "deleteJob"}, 5},
		"since until":   {store.AuditQuery{Since: at(2), Until: at(5)}, 3},
		"user and team": {store.AuditQuery{User: "bob", Team: "web"}, 2},
		"before":        {store.AuditQuery{Before: got[7].ID}, 2},
	} {
		if n := count(tt.q); n != tt.want {
			t.Errorf("%s: %d records, want %d", name, n, tt.want)
		}
	}
	page, more, err := s.ListAudit(ctx, store.AuditQuery{Limit: 3})
	if err != nil || !more || len(page) != 3 {
		t.Errorf("ListAudit(limit 3) = %d, more %v, %v", len(page), more, err)
	}
	_, _, err = s.ListAudit(ctx, store.AuditQuery{Limit: store.MaxAuditLimit + 1})
	wantErr(t, "ListAudit(limit too large)", err, cosmic.ErrInvalid)
	n, err := s.PruneAudit(ctx, at(4))
	if err != nil || n != 4 {
		t.Errorf("PruneAudit(at 4) = %d, %v; want 4", n, err)
	}
	if n := count(store.AuditQuery{}); n != 6 {
		t.Errorf("%d records after pruning, want 6", n)
	}
}
