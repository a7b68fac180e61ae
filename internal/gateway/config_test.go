package gateway

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// TestDomainTurnsOnHTTPS: with a domain the server listens on :443, keeps
// Caddy's automatic HTTPS on, and routes only requests for that host;
// without one, plain HTTP on 127.0.0.1:8080. Caddy validates both.
func TestDomainTurnsOnHTTPS(t *testing.T) {
	for _, tc := range []struct {
		name, domain, listen string
		https                bool
	}{
		{"no domain", "", DefaultListen, false},
		{"domain", "cosmicac.example.com", ":443", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Listen, cfg.Domain = "", tc.domain
			cfg.Storage = t.TempDir()
			b, err := cfg.CaddyJSON()
			if err != nil {
				t.Fatal(err)
			}
			// Caddy takes it: its modules provision (nothing starts).
			var cc caddy.Config
			if err := json.Unmarshal(b, &cc); err != nil {
				t.Fatal(err)
			}
			if err := caddy.Validate(&cc); err != nil {
				t.Errorf("caddy.Validate: %v", err)
			}
			var c struct {
				Apps struct {
					HTTP struct {
						Servers map[string]struct {
							Listen         []string        `json:"listen"`
							AutomaticHTTPS json.RawMessage `json:"automatic_https"`
							Routes         []struct {
								Match []struct {
									Host []string `json:"host"`
								} `json:"match"`
							} `json:"routes"`
						} `json:"servers"`
					} `json:"http"`
				} `json:"apps"`
			}
			if err := json.Unmarshal(b, &c); err != nil {
				t.Fatal(err)
			}
			s := c.Apps.HTTP.Servers["gateway"]
			if len(s.Listen) != 1 || s.Listen[0] != tc.listen {
				t.Errorf("listen %v, want [%s]", s.Listen, tc.listen)
			}
			if https := s.AutomaticHTTPS == nil; https != tc.https {
				t.Errorf("automatic HTTPS on: %v, want %v (%s)", https, tc.https, s.AutomaticHTTPS)
			}
			if tc.domain != "" && (len(s.Routes) != 1 || len(s.Routes[0].Match) != 1 || strings.Join(s.Routes[0].Match[0].Host, ",") != tc.domain) {
				t.Errorf("routes not bound to host %s:\n%s", tc.domain, b)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func(*Config)
		want string // in the error; "" for none
	}{
		"defaults":       {func(*Config) {}, ""},
		"https upstream": {func(c *Config) { c.Monitor = "https://monitor.internal" }, ""},
		"no app-node":    {func(c *Config) { c.AppNode = "" }, "appNode: a URL is required"},
		"a path":         {func(c *Config) { c.Inference = "http://127.0.0.1:8083/inference" }, "inference:"},
		"no scheme":      {func(c *Config) { c.UI = "127.0.0.1:3000" }, "ui:"},
		"bad listen":     {func(c *Config) { c.Listen = "8080" }, "listen"},
		"negative idle":  {func(c *Config) { c.HTTP.Idle = -1 }, "http.idle"},
	} {
		t.Run(name, func(t *testing.T) {
			c := DefaultConfig()
			tc.edit(&c)
			err := c.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate: %v, want %q", err, tc.want)
			}
		})
	}
}
