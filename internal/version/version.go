// Package version says which build of CosmicAC this is. A release stamps it
// at link time:
//
//	go build -ldflags "-X github.com/cosmicac/cosmicac/internal/version.Version=v0.1.0" ./cmd/cosmicac
//
// Without a stamp it reads the build's module information: the module's
// version when built with go install github.com/cosmicac/cosmicac/cmd/cosmicac@v0.1.0,
// else "dev" and the VCS revision the go command recorded. Any package may
// import it.
package version

import (
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
)

// Version is the CosmicAC release: the -X stamp, else the module's version
// from the build information, else "dev". It is one word, for User-Agent
// headers, health checks and handshakes; String is for people.
var Version string

// Revision is the VCS commit the binary was built from (12 hex digits at
// most), and Modified says the work tree had uncommitted changes; both are
// empty when the go command recorded no VCS information (go install
// …@version, go run on files, -buildvcs=false).
var (
	Revision string
	Modified bool
)

func init() {
	bi, _ := debug.ReadBuildInfo()
	Version, Revision, Modified = resolve(Version, bi)
}

// pseudo matches the tail of a Go pseudo-version (v0.0.0-20060102150405-abcdefabcdef),
// which the go command makes up for a commit without a release tag.
var pseudo = regexp.MustCompile(`(^|[-.])\d{14}-[0-9a-f]{12}$`)

// resolve picks the version: the stamp first, as a release's build says
// exactly what it is; else the main module's version, if it names a
// release (go install …@v0.1.0, or go build on a clean tagged checkout);
// else "dev". A pseudo-version or a +dirty one is not a release, and the
// revision says more about it.
func resolve(stamp string, bi *debug.BuildInfo) (version, revision string, modified bool) {
	if bi != nil {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value[:min(len(s.Value), 12)]
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	switch {
	case stamp != "":
		return stamp, revision, modified
	case bi != nil && release(bi.Main.Version):
		return bi.Main.Version, revision, modified
	}
	return "dev", revision, modified
}

func release(v string) bool {
	base, _, _ := strings.Cut(v, "+")
	return strings.HasPrefix(v, "v") && !strings.Contains(v, "+dirty") && !pseudo.MatchString(base)
}

// String is the version for people: "v0.1.0", or "dev (a1b2c3d4e5f6,
// modified)" for a build of a work tree with uncommitted changes.
func String() string { return describe(Version, Revision, Modified) }

func describe(version, revision string, modified bool) string {
	var notes []string
	if revision != "" {
		notes = append(notes, revision)
	}
	if modified {
		notes = append(notes, "modified")
	}
	if len(notes) == 0 {
		return version
	}
	return fmt.Sprintf("%s (%s)", version, strings.Join(notes, ", "))
}

// Long is what cosmicac version prints: the version, then the Go release
// and the platform the binary was built for.
func Long() string {
	return fmt.Sprintf("cosmicac %s\n%s %s/%s\n", String(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
