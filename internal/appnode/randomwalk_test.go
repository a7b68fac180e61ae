package appnode_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/appnode/appnodetest"
	"github.com/cosmicac/cosmicac/internal/authz"
	"github.com/cosmicac/cosmicac/internal/authz/authztest"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// TestAccessRandomWalk: users, teams, memberships, tokens and jobs made and
// changed at random, with random callers acting on random jobs and teams;
// every answer is checked against a model built from docs/permissions.md.
func TestAccessRandomWalk(t *testing.T) {
	doc, err := authztest.Read()
	if err != nil {
		t.Fatal(err)
	}
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	e := appnodetest.NewEnv(t)
	admin := map[string]string{"Authorization": "Bearer " + e.AdminToken}

	type token struct {
		secret, user, team string
		scope              authz.Scope
		selector           map[string]string
		revoked            bool
	}
	type job struct {
		id, team, readUser string
		labels             map[string]string
	}
	teams := []string{"t0", "t1", "t2"}
	users := []string{"u0", "u1", "u2", "u3"}
	roles := map[string]map[string]cosmic.Role{} // user → team → role
	for _, team := range teams {
		if rec := do(e, "POST", "/api/v1/teams", `{"name":"`+team+`"}`, admin); rec.Code != 201 {
			t.Fatalf("create team: %d %s", rec.Code, rec.Body)
		}
	}
	for _, u := range users {
		if rec := do(e, "POST", "/api/v1/users", `{"name":"`+u+`"}`, admin); rec.Code != 201 {
			t.Fatalf("create user: %d %s", rec.Code, rec.Body)
		}
		roles[u] = map[string]cosmic.Role{}
	}
	var (
		tokens []*token
		jobs   []job
	)
	// who is a token as the matrix sees it, acting in team.
	role := func(tk *token, team string) cosmic.Role {
		if tk.team != "" && tk.team != team {
			return ""
		}
		return roles[tk.user][team]
	}
	holds := func(tk *token, team string, p authz.Permission) bool {
		r := role(tk, team)
		return r != "" && authztest.Allows(doc, authztest.Caller{Role: r, Scope: tk.scope}, p)
	}
	pick := func(n int) int { return rng.IntN(n) }
	labels := []map[string]string{nil, {"app": "a"}, {"app": "b"}}

	for step := range 600 {
		switch k := pick(10); {
		case k == 0: // membership change
			u, team := users[pick(len(users))], teams[pick(len(teams))]
			owners := 0
			for _, rs := range roles {
				if rs[team] == cosmic.RoleOwner {
					owners++
				}
			}
			lastOwner := roles[u][team] == cosmic.RoleOwner && owners == 1
			if pick(3) == 0 {
				rec := do(e, "DELETE", "/api/v1/teams/"+team+"/members/"+u, "", admin)
				_, was := roles[u][team]
				if lastOwner {
					if rec.Code != 409 {
						t.Fatalf("step %d: remove the last owner %s of %s: %d, want 409", step, u, team, rec.Code)
					}
					continue
				}
				if was && rec.Code != 204 || !was && rec.Code != 404 {
					t.Fatalf("step %d: remove %s from %s: %d %s", step, u, team, rec.Code, rec.Body)
				}
				delete(roles[u], team)
				for _, tk := range tokens {
					if tk.user == u && tk.team == team {
						tk.revoked = true // a bound token leaves with its membership
					}
				}
				continue
			}
			r := cosmic.Roles[pick(len(cosmic.Roles))]
			rec := do(e, "PUT", "/api/v1/teams/"+team+"/members/"+u, `{"role":"`+string(r)+`"}`, admin)
			if lastOwner && r != cosmic.RoleOwner {
				if rec.Code != 409 {
					t.Fatalf("step %d: demote the last owner %s of %s: %d, want 409", step, u, team, rec.Code)
				}
				continue
			}
			if rec.Code != 200 {
				t.Fatalf("step %d: put member: %d %s", step, rec.Code, rec.Body)
			}
			roles[u][team] = r
		case k == 1: // a token, bound or not, scoped or not
			u := users[pick(len(users))]
			tk := &token{user: u}
			if len(roles[u]) > 0 && pick(2) == 0 {
				for team := range roles[u] {
					tk.team = team
					break
				}
				tk.scope = []authz.Scope{authz.ScopeFull, authz.ScopeRead, authz.ScopeOperator}[pick(3)]
				tk.selector = labels[pick(len(labels))]
			}
			tk.secret = appnodetest.AddToken(t, e.Accounts, store.Token{UserName: u, Name: "w", Team: tk.team, Scope: string(tk.scope), Selector: tk.selector})
			tokens = append(tokens, tk)
		case len(tokens) == 0:
		case k <= 3: // create a job in a random team
			tk := tokens[pick(len(tokens))]
			team := teams[pick(len(teams))]
			lb := labels[pick(len(labels))]
			ru := users[pick(len(users))]
			body := fmt.Sprintf(`{"type":"gpu-container","name":"j%d","location":"us","image":"ubuntu:24.04","readUser":%q`, step, ru)
			if lb != nil {
				body += fmt.Sprintf(`,"labels":{"app":%q}`, lb["app"])
			}
			body += "}"
			rec := do(e, "POST", "/api/v1/jobs", body, map[string]string{"Authorization": "Bearer " + tk.secret, apiv1.HeaderTeam: team})
			want := http.StatusCreated
			switch {
			case tk.revoked:
				want = 401
			case tk.team != "" && tk.team != team:
				want = 403
			case role(tk, team) == "":
				want = 404
			case !holds(tk, team, authz.JobsCreate):
				want = 403
			case tk.selector != nil && lb != nil && lb["app"] != tk.selector["app"]:
				want = 400 // its labels contradict the token's selector
			}
			if rec.Code != want {
				t.Fatalf("step %d: create in %s with %+v (roles %v): %d, want %d: %s", step, team, *tk, roles[tk.user], rec.Code, want, rec.Body)
			}
			if rec.Code == 201 {
				var j cosmic.Job
				if err := json.Unmarshal(rec.Body.Bytes(), &j); err != nil {
					t.Fatal(err)
				}
				if j.Team != team || j.User != tk.user {
					t.Fatalf("step %d: job of team %q user %q, want %s %s", step, j.Team, j.User, team, tk.user)
				}
				jobs = append(jobs, job{id: j.ID, team: team, readUser: ru, labels: j.Spec.Labels})
			}
		case len(jobs) == 0:
		default: // read, label or kill a random job
			tk, j := tokens[pick(len(tokens))], jobs[pick(len(jobs))]
			method, path, body, p := "GET", "/api/v1/jobs/"+j.id, "", authz.JobsRead
			if pick(2) == 0 {
				method, path, body, p = "PUT", path+"/label", `{"name":"seen","value":"yes"}`, authz.JobsOperate
			}
			rec := do(e, method, path, body, map[string]string{"Authorization": "Bearer " + tk.secret})
			want := 200
			selects := tk.selector == nil || j.labels["app"] == tk.selector["app"]
			switch {
			case tk.revoked:
				want = 401
			case !selects:
				want = 404
			case role(tk, j.team) == "":
				want = 404
				if p == authz.JobsRead && j.readUser == tk.user && tk.team == "" && authz.ScopeKeeps(tk.scope, authz.JobsRead) {
					want = 200
				}
			case !holds(tk, j.team, p):
				want = 404
				if holds(tk, j.team, authz.JobsRead) {
					want = 403
				}
			}
			if rec.Code != want {
				t.Fatalf("step %d: %s %s with %+v (roles %v) on %+v: %d, want %d: %s", step, method, path, *tk, roles[tk.user], j, rec.Code, want, rec.Body)
			}
		}
	}
	t.Logf("%d tokens, %d jobs", len(tokens), len(jobs))
}
