// Package archtest holds the tests that keep the architecture's boundaries:
// what each package may depend on, and that every package says what it is.
package archtest

import (
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"
)

type pkg struct {
	ImportPath string
	Doc        string
	Deps       []string
	Imports    []string
	Name       string
}

// list runs `go list -deps=false -json` over the module's packages.
func list(t *testing.T) []pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", "github.com/cosmicac/cosmicac/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// TestEveryPackageIsDocumented: a package comment says what it is and who
// may import it.
func TestEveryPackageIsDocumented(t *testing.T) {
	for _, p := range list(t) {
		if p.Name == "" || strings.HasSuffix(p.ImportPath, "/archtest") {
			continue
		}
		if strings.TrimSpace(p.Doc) == "" {
			t.Errorf("%s has no package comment", p.ImportPath)
		}
	}
}

// TestBoundaries: the ork and the app-node know store.Store, not its
// implementations (the wiring opens one through store/database), and the
// implementations know not each other; the domain does no I/O and knows no Kubernetes; the agents,
// which run inside the VMs, know no Kubernetes either; only the Kubernetes
// worker and its test harness (and the wiring) import client-go; the leaves
// (the config file types, the backoff, the WAV helpers, the HTTP hop and the
// HTTP servers' limits, httpserve) use the standard library and each other
// only, so that any package may import them. The agent binary
// (cmd/cosmicac-agent, internal/agentcmd) carries none of the platform's
// components, drivers or Kubernetes. The servers reach the agents through
// agentapi only.
func TestBoundaries(t *testing.T) {
	const mod = "github.com/cosmicac/cosmicac/internal/"
	kube := []string{"k8s.io/", "kubevirt.io/", "sigs.k8s.io/controller-runtime"}
	rules := map[string][]string{
		mod + "cosmic":     append([]string{"net/http", "database/sql$", "os/exec"}, kube...),
		mod + "agent":      kube,
		mod + "inferagent": kube,
		mod + "fabric":     append([]string{mod + "store", mod + "ork", mod + "cosmic"}, kube...),
		mod + "ork":        append([]string{mod + "store/", mod + "appnode", "github.com/jackc/"}, kube...),
		// Servers reach each other through contract packages only
		// (orkapi, keyapi, proxyapi), never the other's implementation.
		mod + "appnode":     append([]string{mod + "ork$", mod + "ork/placement", mod + "store/", "github.com/jackc/", mod + "inferproxy$", mod + "monitor"}, kube...),
		mod + "inferproxy$": append([]string{mod + "appnode", mod + "ork$", mod + "monitor", mod + "store/"}, kube...),
		// The user verbs talk to the platform through its API client (and
		// the fabric, for keys, rpc and shells): no server, store, driver,
		// gateway or component command is linked into them (issue 33).
		mod + "cli$": append([]string{mod + "ork$", mod + "ork/placement", mod + "appnode", mod + "store", mod + "platform", mod + "simcluster$",
			mod + "qemu", mod + "qemuworker", mod + "k8sworker", mod + "monitor", mod + "inferproxy$", mod + "inferagent", mod + "gateway", mod + "webui",
			mod + "cli/components", "github.com/caddyserver/", "modernc.org/", "github.com/jackc/"}, kube...),
		// The spec ⇄ flags mapping is the domain's and pflag's only.
		mod + "jobflags":            append([]string{mod + "appnode", mod + "cli", mod + "client", mod + "ork", mod + "store", mod + "fabric", "github.com/spf13/cobra"}, kube...),
		mod + "ork/orkapi":          {mod + "ork$", mod + "ork/placement", mod + "appnode", mod + "store", mod + "trust", "k8s.io/"},
		mod + "simcluster/simapi":   {mod, "github.com/", "golang.org/x/", "k8s.io/"},
		mod + "inferproxy/keyapi":   {mod + "appnode", mod + "inferproxy$", mod + "inferagent", mod + "store", mod + "trust", "k8s.io/"},
		mod + "inferproxy/proxyapi": {mod + "appnode", mod + "inferproxy$", mod + "inferagent", mod + "store", mod + "trust", "k8s.io/"},
		// The implementations of store.Store know the interface and the
		// domain, not each other: only store/database picks between them.
		mod + "store/sqlite":   {mod + "store/postgres", mod + "store/database", "github.com/jackc/"},
		mod + "store/postgres": {mod + "store/sqlite", mod + "store/database", "modernc.org/"},
		// Their shared statements know neither driver.
		mod + "store/sqlstore": {mod + "store/sqlite", mod + "store/postgres", mod + "store/database", "modernc.org/", "github.com/jackc/"},
		mod + "config":         append([]string{mod, "github.com/", "golang.org/x/", "sigs.k8s.io/"}, kube...),
		mod + "hop":            append([]string{mod, "github.com/", "golang.org/x/", "sigs.k8s.io/"}, kube...),
		mod + "backoff":        append([]string{mod, "github.com/", "golang.org/x/", "sigs.k8s.io/"}, kube...),
		mod + "wav":            append([]string{mod, "github.com/", "golang.org/x/", "sigs.k8s.io/"}, kube...),
		// The trust graph is what every component imports: it knows the
		// fabric, the domain, the backoff and the contract packages whose
		// methods it names (issue 33), never a server.
		mod + "trust$": {mod + "ork$", mod + "ork/placement", mod + "ork/fairq", mod + "appnode", mod + "agent$", mod + "inferagent", mod + "inferproxy$",
			mod + "monitor", mod + "directory", mod + "k8sworker", mod + "qemuworker", mod + "simcluster$", mod + "store", mod + "platform", mod + "cli", "k8s.io/"},
		// The GGUF reader and writer: the standard library only.
		mod + "gguf$":     append([]string{mod, "github.com/", "golang.org/x/", "sigs.k8s.io/"}, kube...),
		mod + "httpserve": append([]string{mod, "github.com/", "golang.org/x/", "sigs.k8s.io/"}, kube...),
		// The web interface's server is the embedded files and the
		// standard library: any component may serve it.
		mod + "webui": append([]string{mod, "github.com/", "golang.org/x/", "sigs.k8s.io/"}, kube...),
	}
	// The servers reach the agents in the VMs through their contract
	// (agentapi, shellproto), never the agents' implementation (issue 33);
	// the contract knows no implementation either.
	for _, p := range []string{"appnode", "inferproxy$", "k8sworker", "qemuworker", "cli$", "ork", "monitor"} {
		rules[mod+p] = append(rules[mod+p], mod+"agent$", mod+"inferagent")
	}
	rules[mod+"agent/agentapi"] = append([]string{mod + "agent$", mod + "inferagent", mod + "appnode", mod + "ork", mod + "store",
		mod + "inferproxy", mod + "monitor", mod + "platform", mod + "cli", "github.com/creack/"}, kube...)
	// What runs in a tenant's VM carries the agents only: no Kubernetes
	// client, gateway, database driver or platform component (issue 33).
	inVM := append([]string{"github.com/caddyserver/", "modernc.org/", "github.com/jackc/",
		mod + "ork$", mod + "ork/placement", mod + "ork/fairq", mod + "appnode", mod + "store", mod + "cli", mod + "platform", mod + "inferproxy$", mod + "gateway",
		mod + "qemu", mod + "qemuworker", mod + "k8sworker", mod + "simcluster$", mod + "webui", mod + "client"}, kube...)
	rules["github.com/cosmicac/cosmicac/cmd/cosmicac-agent"] = inVM
	rules[mod+"agentcmd"] = inVM
	leaves := map[string]bool{mod + "config": true, mod + "backoff": true, mod + "wav": true, mod + "hop": true, mod + "httpserve": true, mod + "webui": true}
	pkgs := list(t)
	for _, p := range pkgs {
		// sqlstore is the two SQL stores' own.
		if p.ImportPath != mod+"store/sqlite" && p.ImportPath != mod+"store/postgres" && slices.Contains(p.Imports, mod+"store/sqlstore") &&
			!strings.HasPrefix(p.ImportPath, mod+"store/sqlstore") {
			t.Errorf("%s imports store/sqlstore (only the SQLite and PostgreSQL stores may)", p.ImportPath)
		}
	}
	for _, p := range pkgs {
		banned, ok := rules[p.ImportPath]
		if !ok {
			// A rule's key may end in $ too, saying it is the package
			// itself (the rules hold for each key as it is written).
			if banned, ok = rules[p.ImportPath+"$"]; !ok {
				continue
			}
		}
		for _, d := range p.Deps {
			if leaves[p.ImportPath] && leaves[d] {
				continue // a leaf may build on another
			}
			for _, b := range banned {
				if matches(d, b) {
					t.Errorf("%s depends on %s", p.ImportPath, d)
				}
			}
		}
	}
}

// TestVMBootIsPure: the boot builder every VM rack shares (the Kubernetes
// worker, a QEMU rack) knows no Kubernetes and no component: of the module
// it imports the domain only (and what the domain imports).
func TestVMBootIsPure(t *testing.T) {
	const mod = "github.com/cosmicac/cosmicac/internal/"
	pkgs := list(t)
	allowed := map[string]bool{mod + "cosmic": true}
	var vmboot *pkg
	for i, p := range pkgs {
		switch p.ImportPath {
		case mod + "cosmic":
			for _, d := range p.Deps {
				allowed[d] = true
			}
		case mod + "vmboot":
			vmboot = &pkgs[i]
		}
	}
	if vmboot == nil {
		t.Fatal("no package internal/vmboot")
	}
	for _, d := range vmboot.Deps {
		switch {
		case strings.HasPrefix(d, "k8s.io/"), strings.HasPrefix(d, "kubevirt.io/"), strings.HasPrefix(d, "sigs.k8s.io/controller-runtime"):
			t.Errorf("vmboot depends on %s", d)
		case strings.HasPrefix(d, mod) && !allowed[d]:
			t.Errorf("vmboot depends on the component %s", d)
		}
	}
}

// matches reports whether dependency d falls under rule b: "x$" is exactly
// x; "x/" is everything under x; "x" is x and everything under it.
func matches(d, b string) bool {
	switch {
	case strings.HasSuffix(b, "$"):
		return d == strings.TrimSuffix(b, "$")
	case strings.HasSuffix(b, "/"):
		return strings.HasPrefix(d, b)
	default:
		return d == b || strings.HasPrefix(d, b+"/")
	}
}

// TestPoliciesComeFromTheTrustGraph: no component builds its fabric policy
// by hand (docs/security.md): outside internal/fabric and internal/trust,
// allow-lists and policy funcs appear only in tests and in the CLI's
// client commands, which pin the one peer they dial.
func TestPoliciesComeFromTheTrustGraph(t *testing.T) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse: %v", err)
	}
	out, err := exec.Command("git", "-C", strings.TrimSpace(string(top)), "grep", "-n", "-E",
		`NewAllowList|AllowReadOnly|SetAllowAny|PolicyFunc\(|AllowList\{`, "--", "internal", "cmd").Output()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return // no match at all
	case err != nil:
		t.Fatalf("git grep: %v", err)
	}
	clients := map[string]bool{"internal/cli/rpc.go": true, "internal/cli/shell.go": true, "internal/cli/ssh.go": true}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		file := strings.SplitN(line, ":", 2)[0]
		switch {
		case strings.HasSuffix(file, "_test.go"), strings.HasPrefix(file, "internal/fabric/"), strings.HasPrefix(file, "internal/trust/"),
			strings.HasPrefix(file, "internal/cosmictest/"), clients[file]:
			continue
		}
		t.Errorf("a policy built by hand, not from internal/trust: %s", line)
	}
}

// TestNoTestOrSimulatorInProduction: no package imports a test harness
// (cosmictest, k8stest, trusttest, …) but another harness; the simulated
// rack, its sshd and the simulated runtime are imported only by the wiring (the binary, cli/components,
// platform), the simulated runtime's launcher (inferagent/simlaunch) and
// the harnesses: the agents, the workers and the servers carry none.
func TestNoTestOrSimulatorInProduction(t *testing.T) {
	const mod = "github.com/cosmicac/cosmicac/internal/"
	harness := func(p string) bool {
		return strings.HasPrefix(p, mod) && strings.HasSuffix(p, "test") || p == mod+"testenv"
	}
	simulator := map[string]bool{mod + "simcluster": true, mod + "simsshd": true, mod + "simruntime": true}
	mayUseSimulators := map[string]bool{"github.com/cosmicac/cosmicac/cmd/cosmicac": true, mod + "cli/components": true, mod + "platform": true,
		mod + "inferagent/simlaunch": true, mod + "agentcmd": true, "github.com/cosmicac/cosmicac/cmd/cosmicac-agent": true}
	for _, p := range list(t) {
		if harness(p.ImportPath) || strings.HasSuffix(p.ImportPath, "/archtest") {
			continue
		}
		for _, d := range p.Deps {
			switch {
			case harness(d):
				t.Errorf("%s depends on the test harness %s", p.ImportPath, d)
			case simulator[d] && !simulator[p.ImportPath] && !mayUseSimulators[p.ImportPath]:
				t.Errorf("%s depends on the simulator %s", p.ImportPath, d)
			}
		}
	}
}

// TestComponentsTakeDepsNotSetters: a component is built whole, by
// New(cfg, Deps) (docs/architecture.md, "Where a change goes"), so that
// `cosmicac up` and the standalone command cannot assemble it differently:
// no exported Set… method of a pointer receiver, one argument and no
// result (a dependency installed after construction) in a component's
// package.
func TestComponentsTakeDepsNotSetters(t *testing.T) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse: %v", err)
	}
	root := strings.TrimSpace(string(top))
	for _, dir := range []string{"appnode", "ork", "monitor", "inferproxy", "simcluster", "qemuworker", "k8sworker", "agent", "inferagent"} {
		fset := token.NewFileSet()
		files, err := filepath.Glob(filepath.Join(root, "internal", dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("internal/%s: no Go files (%v)", dir, err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Recv == nil || !fn.Name.IsExported() || !strings.HasPrefix(fn.Name.Name, "Set") ||
					len(fn.Name.Name) == 3 || !unicode.IsUpper(rune(fn.Name.Name[3])) {
					continue
				}
				if _, ptr := fn.Recv.List[0].Type.(*ast.StarExpr); ptr && fn.Type.Params.NumFields() == 1 && fn.Type.Results.NumFields() == 0 {
					t.Errorf("%s: %s installs a dependency after construction: make it a field of the component's Deps",
						fset.Position(fn.Pos()), fn.Name.Name)
				}
			}
		}
	}
}
