package version

import (
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	vcs := func(main, rev, modified string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/cosmicac/cosmicac", Version: main}}
		if rev != "" {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: "vcs.revision", Value: rev})
		}
		if modified != "" {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: "vcs.modified", Value: modified})
		}
		return bi
	}
	const rev = "0df3f09a1b2c3d4e5f60718293a4b5c6d7e8f901"
	for name, tc := range map[string]struct {
		stamp string
		bi    *debug.BuildInfo
		want  string
	}{
		"stamped":                      {"v0.2.0", vcs("(devel)", rev, "false"), "v0.2.0 (0df3f09a1b2c)"},
		"stamp wins over module":       {"v0.2.0-rc1", vcs("v0.1.0", "", ""), "v0.2.0-rc1"},
		"go install at a release":      {"", vcs("v0.1.0", "", ""), "v0.1.0"},
		"clean tagged checkout":        {"", vcs("v0.1.0", rev, "false"), "v0.1.0 (0df3f09a1b2c)"},
		"work tree with changes":       {"", vcs("v0.0.0-20261201134755-0df3f09a1b2c+dirty", rev, "true"), "dev (0df3f09a1b2c, modified)"},
		"commit after a tag":           {"", vcs("v0.1.1-0.20261201134755-0df3f09a1b2c", rev, "false"), "dev (0df3f09a1b2c)"},
		"tagged checkout with changes": {"", vcs("v0.1.0+dirty", rev, "true"), "dev (0df3f09a1b2c, modified)"},
		"no vcs information":           {"", vcs("(devel)", "", ""), "dev"},
		"no build information":         {"", nil, "dev"},
	} {
		t.Run(name, func(t *testing.T) {
			v, r, m := resolve(tc.stamp, tc.bi)
			if got := describe(v, r, m); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
