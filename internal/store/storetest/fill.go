package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// Fill writes some of every kind of row into an empty store: racks, jobs
// with labels and GPU claims, teams, users with passwords, members,
// tokens and sessions, quotas and audit records. Backup, restore and copy
// tests fill one store, move it, and compare with Contents.
func Fill(t *testing.T, s store.Store, jobs int) {
	t.Helper()
	ctx := context.Background()
	rackFixture(t, s)
	for i := range jobs {
		j := job(fmt.Sprintf("j%04d", i), "ml", "ana", cosmic.StateRunning, fmt.Sprintf("job-%d", i), map[string]string{"app": fmt.Sprint(i % 3)}, i, i+1)
		if err := s.CreateJob(ctx, j); err != nil {
			t.Fatalf("CreateJob(%s) = %v", j.ID, err)
		}
		if i < 4 {
			if err := s.ClaimGPUs(ctx, res(j.ID, 0, "r1", on("n1", 2*i, 2*i+1))); err != nil {
				t.Fatalf("ClaimGPUs(%s) = %v", j.ID, err)
			}
		}
	}
	for _, tm := range []string{"ml", "web"} {
		if err := s.CreateTeam(ctx, cosmic.Team{Name: tm, CreatedAt: at(1)}); err != nil {
			t.Fatalf("CreateTeam(%s) = %v", tm, err)
		}
	}
	if err := s.CreateUser(ctx, cosmic.User{Name: "ana", PlatformAdmin: true, CreatedAt: at(2)}, "$argon2id$fake"); err != nil {
		t.Fatalf("CreateUser = %v", err)
	}
	if err := s.CreateUser(ctx, cosmic.User{Name: "ben", CreatedAt: at(3)}, ""); err != nil {
		t.Fatalf("CreateUser = %v", err)
	}
	if err := s.PutMember(ctx, cosmic.Member{Team: "ml", User: "ana", Role: cosmic.RoleOwner}); err != nil {
		t.Fatalf("PutMember = %v", err)
	}
	if err := s.PutMember(ctx, cosmic.Member{Team: "web", User: "ben", Role: cosmic.RoleMember}); err != nil {
		t.Fatalf("PutMember = %v", err)
	}
	for _, tok := range []store.Token{
		{ID: "t1", Name: "ci", UserName: "ana", Hash: []byte("hash-1"), Team: "ml", Scope: "read", Selector: map[string]string{"app": "1"}, CreatedAt: at(4), ExpiresAt: at(9000)},
		{ID: "s1", Kind: store.KindSession, Name: "session", UserName: "ben", Hash: []byte("hash-2"), CSRF: []byte("csrf-2"), CreatedAt: at(5)},
	} {
		if err := s.CreateToken(ctx, tok); err != nil {
			t.Fatalf("CreateToken(%s) = %v", tok.ID, err)
		}
	}
	if err := s.PutQuota(ctx, store.Quota{Team: "ml", Location: "us", GPUs: 8, UpdatedAt: at(6), UpdatedBy: "ana"}); err != nil {
		t.Fatalf("PutQuota = %v", err)
	}
	if err := s.RecordUsage(ctx, "fill", []store.UsageRow{{Start: at(7), Team: "ml", KeyID: "k1", JobID: "j1", Model: "@ml/chat",
		Requests: 2, PromptTokens: 100, CompletionTokens: 20}}); err != nil {
		t.Fatalf("RecordUsage = %v", err)
	}
	for i := range 3 {
		if err := s.AppendAudit(ctx, store.AuditRecord{At: at(10 + i), User: "ana", Team: "ml", Action: "createJob", Target: fmt.Sprint(i), Remote: "10.0.0.1", Status: 201}); err != nil {
			t.Fatalf("AppendAudit = %v", err)
		}
	}
}

// Contents is what a store holds, read through its interface, for
// comparing two stores.
type Contents struct {
	Jobs         []cosmic.Job
	Total        int
	Reservations []cosmic.Reservation
	Racks        []store.Rack
	Teams        []cosmic.Team
	Users        []cosmic.User
	Passwords    map[string]string
	Members      map[string][]cosmic.Member
	Tokens       map[string][]store.Token
	Quotas       []store.Quota
	Audit        []store.AuditRecord
	Usage        []store.UsageRow
}

// Read reads s's Contents.
func Read(t *testing.T, s store.Store) Contents {
	t.Helper()
	ctx := context.Background()
	var c Contents
	var err error
	if c.Jobs, c.Total, err = s.ListJobs(ctx, store.ListJobsQuery{Size: store.MaxPageSize}); err != nil {
		t.Fatalf("ListJobs = %v", err)
	}
	if c.Reservations, err = s.Reservations(ctx); err != nil {
		t.Fatalf("Reservations = %v", err)
	}
	if c.Racks, err = s.Racks(ctx); err != nil {
		t.Fatalf("Racks = %v", err)
	}
	if c.Teams, err = s.ListTeams(ctx); err != nil {
		t.Fatalf("ListTeams = %v", err)
	}
	if c.Users, err = s.ListUsers(ctx); err != nil {
		t.Fatalf("ListUsers = %v", err)
	}
	c.Passwords, c.Members, c.Tokens = map[string]string{}, map[string][]cosmic.Member{}, map[string][]store.Token{}
	for _, u := range c.Users {
		if c.Passwords[u.Name], err = s.PasswordHash(ctx, u.Name); err != nil {
			t.Fatalf("PasswordHash = %v", err)
		}
		for _, k := range []store.TokenKind{store.KindToken, store.KindSession} {
			toks, err := s.ListTokens(ctx, u.Name, k)
			if err != nil {
				t.Fatalf("ListTokens = %v", err)
			}
			c.Tokens[u.Name] = append(c.Tokens[u.Name], toks...)
		}
	}
	for _, tm := range c.Teams {
		if c.Members[tm.Name], err = s.Members(ctx, tm.Name); err != nil {
			t.Fatalf("Members = %v", err)
		}
	}
	if c.Quotas, err = s.ListQuotas(ctx, ""); err != nil {
		t.Fatalf("ListQuotas = %v", err)
	}
	if c.Audit, _, err = s.ListAudit(ctx, store.AuditQuery{Limit: store.MaxAuditLimit}); err != nil {
		t.Fatalf("ListAudit = %v", err)
	}
	all := []store.UsageGroup{store.GroupHour, store.GroupTeam, store.GroupKey, store.GroupModel, store.GroupJob}
	if c.Usage, err = s.ListUsage(ctx, store.UsageQuery{From: time.Unix(0, 0), To: time.Now().Add(time.Hour), GroupBy: all}); err != nil {
		t.Fatalf("ListUsage = %v", err)
	}
	return c
}

// Same fails t unless a and b hold the same Contents, and a holds some of
// each kind.
func Same(t *testing.T, a, b store.Store) {
	t.Helper()
	ca, cb := Read(t, a), Read(t, b)
	if len(ca.Jobs) == 0 || len(ca.Reservations) == 0 || len(ca.Users) == 0 || len(ca.Audit) == 0 || len(ca.Quotas) == 0 || len(ca.Usage) == 0 {
		t.Fatalf("the source holds too little to compare: %+v", ca)
	}
	if diff := cmp.Diff(ca, cb, jobOpts); diff != "" {
		t.Errorf("contents differ (-source +copy):\n%s", diff)
	}
}

// Writable fails t unless b, a copy of a (Fill'ed), takes the same new
// writes as a: a job, a GPU claim next to the copied ones and one refused
// on a copied one, an audit record after the copied ones.
func Writable(t *testing.T, a, b store.Store) {
	t.Helper()
	ctx := context.Background()
	for _, s := range []store.Store{a, b} {
		j := job("new", "ml", "ana", cosmic.StateQueued, "new", nil, 1, 1)
		if err := s.CreateJob(ctx, j); err != nil {
			t.Fatalf("CreateJob(new) = %v", err)
		}
		if err := s.ClaimGPUs(ctx, res("new", 0, "r1", on("n1", 1))); !errors.Is(err, cosmic.ErrConflict) {
			t.Errorf("claiming a GPU the copy holds = %v, want ErrConflict", err)
		}
		if err := s.ClaimGPUs(ctx, res("new", 0, "r1", on("n2", 7))); err != nil {
			t.Errorf("ClaimGPUs(new) = %v", err)
		}
		if err := s.AppendAudit(ctx, store.AuditRecord{At: at(100), User: "ana", Action: "x", Status: 200}); err != nil {
			t.Errorf("AppendAudit = %v", err)
		}
	}
	Same(t, a, b)
}

// Base is the time of the fixtures.
func Base() time.Time { return base }
