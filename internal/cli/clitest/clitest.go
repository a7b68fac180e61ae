// Package clitest runs the cosmicac command tree in tests outside package
// cli: in-process (Run) and as this test binary re-run as cosmicac
// (Main, with COSMICAC_TEST_MAIN=1). The tree is whatever the test binary
// links: package cli's user verbs, and the component commands where the
// test imports internal/cli/components.
package clitest

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cosmicac/cosmicac/internal/cli"
	"github.com/cosmicac/cosmicac/internal/store/postgres/pgtest"
	"github.com/cosmicac/cosmicac/internal/waittest"
)

// Run runs the command line in-process, with stdin and the environment
// env (nothing else of the process's), and returns its exit code and
// output. It gives the command a minute.
func Run(t testing.TB, env map[string]string, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	a := &cli.App{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code = a.Run(ctx, args)
	return code, out.String(), errb.String()
}

// EnvMain is the variable that makes a test binary run as cosmicac (Main).
const EnvMain = "COSMICAC_TEST_MAIN"

// Main is a test binary's TestMain: with COSMICAC_TEST_MAIN=1 the binary
// is `cosmicac` itself (so that tests can run it as a component or as the
// ssh ProxyCommand); otherwise it runs the tests, stops the PostgreSQL
// that some start, and then runs cleanup, if any.
func Main(m *testing.M, cleanup func()) int {
	if os.Getenv(EnvMain) == "1" {
		return cli.Main(os.Args[1:])
	}
	code := pgtest.Main(m)
	if cleanup != nil {
		cleanup()
	}
	return code
}

// LockedBuffer is a bytes.Buffer that a running command writes while the
// test reads it.
type LockedBuffer = waittest.Buffer
