package apiv1

import (
	"fmt"
	"net/http"
	"strings"
)

// HeaderAPIKey carries an inference API key, as OpenAI's clients send it
// besides Authorization.
const HeaderAPIKey = "X-API-Key"

// Credential is one way a CosmicAC credential travels over HTTP: a header
// or a cookie, what it carries, and the only servers it may reach. Every
// relay that passes a request on to a job (the job HTTP relay under
// /api/v1/jobs/{id}/http, proxy-inference to a model's runtime) takes them
// off with StripCredentials, and takes off an answer's attempt to set one
// with StripCredentialCookies: a tenant is root in its VM, and whatever
// reaches the VM is the tenant's.
type Credential struct {
	Name   string
	Cookie bool
	// Carries is what it holds; Reaches the servers that read it.
	Carries, Reaches string
}

// Credentials lists every platform credential (docs/security.md,
// "Platform credentials", is generated from it).
var Credentials = []Credential{
	{Name: "Authorization", Carries: "a user's API token (`Bearer cac_…`) or an inference API key (`Bearer sk-cac-…`)",
		Reaches: "the app-node (`/api`), wrk-monitor (`/monitor`, which asks the app-node), proxy-inference (`/inference`)"},
	{Name: HeaderAPIKey, Carries: "an inference API key (`sk-cac-…`)", Reaches: "proxy-inference (`/inference`)"},
	{Name: SessionCookie, Cookie: true, Carries: "a browser session's secret (HttpOnly, SameSite=Strict, Secure over TLS)",
		Reaches: "the app-node and wrk-monitor only: set for `Path=/api` and `Path=/monitor`, so a browser never sends it to `/inference` or to the web interface's pages"},
	{Name: HeaderCSRF, Carries: "a browser session's CSRF token, required with the cookie on every request that changes something",
		Reaches: "the app-node (`/api`)"},
}

// StripCredentials takes every platform credential off the headers of a
// request that goes on to a job: the credential headers, and the session
// cookie from every Cookie line (a job's own cookies stay). Hop-by-hop
// headers (Proxy-Authorization among them) are the relay's to drop.
func StripCredentials(h http.Header) {
	for _, c := range Credentials {
		if !c.Cookie {
			h.Del(c.Name)
		}
	}
	lines := h.Values("Cookie")
	if len(lines) == 0 {
		return
	}
	var keep []string
	for _, line := range lines {
		for part := range strings.SplitSeq(line, ";") {
			name, _, _ := strings.Cut(strings.TrimSpace(part), "=")
			if !credentialCookie(name) && strings.TrimSpace(part) != "" {
				keep = append(keep, strings.TrimSpace(part))
			}
		}
	}
	h.Del("Cookie")
	if len(keep) > 0 {
		h.Set("Cookie", strings.Join(keep, "; "))
	}
}

// StripCredentialCookies takes off an answer's Set-Cookie lines that set a
// platform credential's cookie (a session fixed on the caller's browser by
// a job); the job's own cookies stay.
func StripCredentialCookies(h http.Header) {
	lines := h.Values("Set-Cookie")
	if len(lines) == 0 {
		return
	}
	var keep []string
	for _, v := range lines {
		ck, err := http.ParseSetCookie(v)
		if err != nil {
			// What a browser might still read as one of ours goes too.
			name, _, _ := strings.Cut(v, "=")
			if credentialCookie(strings.TrimSpace(name)) {
				continue
			}
		} else if credentialCookie(ck.Name) {
			continue
		}
		keep = append(keep, v)
	}
	h.Del("Set-Cookie")
	for _, v := range keep {
		h.Add("Set-Cookie", v)
	}
}

// credentialCookie reports whether a cookie of that name is a platform
// credential's, matching as a browser would not: in any case.
func credentialCookie(name string) bool {
	for _, c := range Credentials {
		if c.Cookie && strings.EqualFold(name, c.Name) {
			return true
		}
	}
	return false
}

// CredentialsTable is the Markdown table of Credentials that
// docs/security.md holds.
func CredentialsTable() string {
	var b strings.Builder
	b.WriteString("| credential | kind | carries | reaches |\n|---|---|---|---|\n")
	for _, c := range Credentials {
		kind := "header"
		if c.Cookie {
			kind = "cookie"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", c.Name, kind, c.Carries, c.Reaches)
	}
	return b.String()
}
