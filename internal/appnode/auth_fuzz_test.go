package appnode

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/cosmic"
)

// FuzzCredential: any Authorization header and session cookie is either
// refused as unauthorized or read as a well-formed secret of one of the
// two kinds, never a panic, and the secret read is the one given.
func FuzzCredential(f *testing.F) {
	tok, _, _ := NewToken()
	ses, _, _ := newSecret(SessionPrefix)
	for _, s := range []string{"Bearer " + tok, "bearer  " + tok + " ", "Basic abc", "Bearer", "Bearer cac_", "", "Bearer " + ses, "Bearer \x00"} {
		f.Add(s, "")
	}
	f.Add("", ses)
	f.Add("", "cas_"+strings.Repeat("A", 43))
	f.Add("", tok)
	f.Fuzz(func(t *testing.T, authz, cookie string) {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/whoami", nil)
		if authz != "" {
			r.Header["Authorization"] = []string{authz}
		}
		if cookie != "" {
			r.Header["Cookie"] = []string{apiv1.SessionCookie + "=" + cookie}
		}
		secret, fromCookie, err := credential(r)
		if err != nil {
			if err != errUnauthorized {
				t.Fatalf("credential: %v, want errUnauthorized", err)
			}
			return
		}
		if !wellFormed(secret, TokenPrefix) && !wellFormed(secret, SessionPrefix) {
			t.Fatalf("credential read %q, which is not well formed", secret)
		}
		if fromCookie && (authz != "" || !strings.Contains(cookie, secret)) || !fromCookie && !strings.Contains(authz, secret) {
			t.Fatalf("credential read %q (cookie %v) from %q / %q", secret, fromCookie, authz, cookie)
		}
	})
}

// FuzzPHC: a stored password hash of any shape verifies nothing unless it
// is a real argon2id string, and never asks for unbounded memory.
func FuzzPHC(f *testing.F) {
	h, _ := hashPassword("pw", argonParams{memory: 8, time: 1, threads: 1, keyLen: 16})
	for _, s := range []string{h, "", "$argon2id$v=19$m=4294967295,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA", "$argon2i$v=19$m=8,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA", "$$$$$"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, phc string) {
		p, salt, key, err := parsePHC(phc)
		if err != nil {
			return
		}
		if p.memory == 0 || p.memory > maxArgonMemory || p.time == 0 || p.time > maxArgonTime || p.threads == 0 || len(salt) < 8 || len(key) < 16 {
			t.Fatalf("parsePHC(%q) accepted %+v salt %d key %d", phc, p, len(salt), len(key))
		}
	})
}

// FuzzTeamHeader: any team header or query is refused with a 4xx or names
// a team the caller is in; it never lets a caller act in another team.
func FuzzTeamHeader(f *testing.F) {
	for _, s := range []string{"ml", "web", "*", "", "ML", "ml ", "../ml", strings.Repeat("a", 70), "ml,web"} {
		f.Add(s, "")
		f.Add("", s)
	}
	f.Fuzz(func(t *testing.T, header, query string) {
		r := httptest.NewRequest(http.MethodGet, "/api/v1/jobs", nil)
		if header != "" {
			r.Header["X-Cosmicac-Team"] = []string{header}
		}
		if query != "" {
			r.URL.RawQuery = "team=" + query
		}
		c := &caller{roles: map[string]cosmic.Role{"ml": cosmic.RoleMember}}
		s := &Server{}
		err := s.activeTeam(r, c, true)
		if err == nil && c.team != "" && c.team != "ml" {
			t.Fatalf("header %q query %q: acts in %q", header, query, c.team)
		}
		if err == nil && c.allTeams {
			t.Fatalf("header %q query %q: a member acts in every team", header, query)
		}
	})
}
