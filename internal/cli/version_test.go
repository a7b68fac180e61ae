package cli

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/cosmicac/cosmicac/internal/version"
)

// TestVersion: cosmicac version and --version print the same, the version
// (from the build when no -X stamp is given) then the Go release and the
// platform.
func TestVersion(t *testing.T) {
	code, out, errs := runCLI(t, nil, "version")
	want := "cosmicac " + version.String() + "\n" + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	if code != 0 || out != want {
		t.Fatalf("version: exit %d, %q (%s); want %q", code, out, errs, want)
	}
	if code, got, _ := runCLI(t, nil, "--version"); code != 0 || got != out {
		t.Errorf("--version: exit %d, %q; want %q", code, got, out)
	}
	code, out, _ = runCLI(t, nil, "version", "-o", "json")
	var v versionInfo
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v.Version != version.Version || v.GoVersion != runtime.Version() ||
		v.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("version -o json: exit %d, %v\n%s", code, err, out)
	}
	if version.Version == "" || strings.ContainsAny(version.Version, " \t\n") {
		t.Errorf("version.Version %q: want one word, for User-Agent headers", version.Version)
	}
	if code, _, _ := runCLI(t, nil, "version", "extra"); code != ExitUsage {
		t.Errorf("version extra: exit %d, want %d", code, ExitUsage)
	}
}
