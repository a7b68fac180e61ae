// Package k8stest runs a real kube-apiserver and etcd for tests, with the real
// KubeVirt (VirtualMachineInstance, VirtualMachine), CDI (DataVolume) and
// Multus (NetworkAttachmentDefinition) CRDs installed. It is a test helper:
// import it from _test.go files only.
//
// The binaries come from hack/build-test-apiserver.sh (built from Go modules,
// cached outside the checkout); the CRDs are committed under testdata/crds
// (regenerate with hack/crdgen/gen-crds.sh). Nothing runs KubeVirt's or CDI's
// controllers: tests play them by setting VMI status with a plain update (the
// VMI CRD has no status subresource) and DataVolume status through the status
// subresource. See docs/testing-kubernetes.md.
//
// Usage, one control plane per test:
//
//	env := k8stest.Start(t) // stopped by t.Cleanup
//	env.Client.Create(ctx, obj)
//
// or one per test package, started on first use:
//
//	func TestMain(m *testing.M) { code := m.Run(); k8stest.StopShared(); os.Exit(code) }
//	func TestX(t *testing.T)    { env := k8stest.Shared(t); ... }
//
// When the binaries are missing, Start and Shared skip the test with the
// command that builds them, except when $CI or $KUBEBUILDER_ASSETS is set:
// then they fail it (CI never skips these tests).
package k8stest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/cosmicac/cosmicac/internal/testenv"
)

// Versions of the binaries that hack/build-test-apiserver.sh builds by default.
const (
	KubernetesVersion = "1.37.2"
	EtcdVersion       = "3.7.3"
)

// EnvAssetsDir names the directory with the kube-apiserver and etcd binaries
// when KUBEBUILDER_ASSETS is not set (the script's DEST default too).
const EnvAssetsDir = "COSMICAC_ENVTEST_DIR"

// ErrNoAssets is returned (wrapped) by StartShared when kube-apiserver or etcd
// is not there; the message says how to build them.
var ErrNoAssets = errors.New("k8stest: kube-apiserver/etcd binaries not found")

// Env is a running control plane.
type Env struct {
	// Config is an admin (system:masters) client config for the apiserver. It
	// stays valid across StopAPIServer/StartAPIServer.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file for Config (embedded
	// client certificate and CA), in a temporary directory removed by Stop.
	Kubeconfig string
	// Scheme is Scheme(): client-go's types, apiextensions/v1, KubeVirt core/v1,
	// CDI core/v1beta1 and Multus k8s.cni.cncf.io/v1.
	Scheme *k8sruntime.Scheme
	// Client is a controller-runtime client (no cache) with Scheme.
	Client client.Client
	// StartDuration is how long Start took: etcd, apiserver and CRDs.
	StartDuration time.Duration
	// Environment is the underlying envtest environment.
	Environment *envtest.Environment

	// StopDurations are how long each StopAPIServer took, and Killed how
	// many of them had to kill kube-apiserver (graceful shutdown longer than
	// APIServerStopGrace).
	StopDurations []time.Duration
	Killed        int

	dir     string // certs, kubeconfig, logs
	logs    []*os.File
	mu      sync.Mutex
	stopped bool
	opts    options
}

// APIServerStopGrace is how long StopAPIServer (and Stop) let kube-apiserver
// shut down after SIGTERM before envtest kills its process group (SIGKILL).
// With --shutdown-watch-termination-grace-period set (see start) a graceful
// shutdown takes about a second even with watches open.
const APIServerStopGrace = 8 * time.Second

// options are knobs for this package's own tests.
type options struct {
	stopGrace time.Duration     // default APIServerStopGrace
	flags     map[string]string // extra or overriding kube-apiserver flags
}

// Scheme returns a new scheme with client-go's built-in types,
// apiextensions/v1, KubeVirt core/v1, CDI core/v1beta1 and Multus
// k8s.cni.cncf.io/v1.
func Scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(kubevirtv1.AddToScheme(s))
	utilruntime.Must(cdiv1.AddToScheme(s))
	utilruntime.Must(nadv1.AddToScheme(s))
	return s
}

// packageDir is this source file's directory (tests run with the source tree).
func packageDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("k8stest: runtime.Caller failed")
	}
	return filepath.Dir(file)
}

// CRDDir is the directory of the committed CRD YAML (testdata/crds).
func CRDDir() string { return filepath.Join(packageDir(), "testdata", "crds") }

// BuildScript is the absolute path of hack/build-test-apiserver.sh.
func BuildScript() string {
	return filepath.Join(packageDir(), "..", "..", "hack", "build-test-apiserver.sh")
}

// AssetsDir is where the binaries are looked for: $KUBEBUILDER_ASSETS, else
// $COSMICAC_ENVTEST_DIR, else ~/.cache/cosmicac/envtest/k8s-1.37.2-etcd-3.7.3.
// (envtest's TEST_ASSET_KUBE_APISERVER and TEST_ASSET_ETCD still override
// single binaries.)
func AssetsDir() string {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d
	}
	if d := os.Getenv(EnvAssetsDir); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "cosmicac", "envtest",
		"k8s-"+KubernetesVersion+"-etcd-"+EtcdVersion)
}

func binPath(name, envOverride string) string {
	if p := os.Getenv(envOverride); p != "" {
		return p
	}
	return filepath.Join(AssetsDir(), name)
}

// checkAssets returns an error wrapping ErrNoAssets if a binary is missing.
func checkAssets() error {
	var missing []string
	for _, b := range []struct{ name, env string }{
		{"kube-apiserver", "TEST_ASSET_KUBE_APISERVER"},
		{"etcd", "TEST_ASSET_ETCD"},
	} {
		p := binPath(b.name, b.env)
		if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	build := BuildScript()
	if os.Getenv("KUBEBUILDER_ASSETS") != "" || os.Getenv(EnvAssetsDir) != "" {
		build += " " + AssetsDir()
	}
	return fmt.Errorf("%w: missing %s; build them (5-10 min, once per machine) with:\n\t%s",
		ErrNoAssets, strings.Join(missing, ", "), build)
}

// mustRun reports whether missing binaries fail tests instead of skipping
// them: under CI ($CI set, as internal/fabric's tests) or when
// KUBEBUILDER_ASSETS names them explicitly (.ci/run exports it).
func mustRun() bool {
	return testenv.CI() || os.Getenv("KUBEBUILDER_ASSETS") != ""
}

// skipOrFail skips t when the binaries are missing, or fails it if mustRun.
func skipOrFail(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrNoAssets) && !mustRun() {
		t.Skip(err)
	}
	t.Fatal(err)
}

// Start starts a control plane for one test and stops it in t.Cleanup. It
// skips the test if the binaries are missing (fails it under CI).
func Start(t testing.TB) *Env {
	t.Helper()
	env, stop, err := StartShared()
	if err != nil {
		skipOrFail(t, err)
	}
	t.Cleanup(stop)
	t.Logf("k8stest: kube-apiserver v%s + etcd v%s with KubeVirt/CDI/Multus CRDs started in %v",
		KubernetesVersion, EtcdVersion, env.StartDuration.Round(time.Millisecond))
	return env
}

// StartShared starts a control plane, for a TestMain or several tests; call
// the returned function (or Env.Stop) to stop it. The error wraps ErrNoAssets
// when the binaries are missing.
func StartShared() (*Env, func(), error) { return startShared(options{}) }

func startShared(opts options) (*Env, func(), error) {
	if err := checkAssets(); err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "cosmicac-k8stest-")
	if err != nil {
		return nil, nil, err
	}
	if opts.stopGrace == 0 {
		opts.stopGrace = APIServerStopGrace
	}
	e := &Env{dir: dir, Scheme: Scheme(), opts: opts}
	if err := e.start(); err != nil {
		e.Stop()
		return nil, nil, err
	}
	return e, e.Stop, nil
}

func (e *Env) logFile(name string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(e.dir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err == nil {
		e.logs = append(e.logs, f)
	}
	return f, err
}

func (e *Env) start() error {
	t0 := time.Now()
	etcdLog, err := e.logFile("etcd.log")
	if err != nil {
		return err
	}
	apiLog, err := e.logFile("kube-apiserver.log")
	if err != nil {
		return err
	}
	certDir := filepath.Join(e.dir, "apiserver")
	if err := os.Mkdir(certDir, 0o700); err != nil {
		return err
	}
	te := &envtest.Environment{
		BinaryAssetsDirectory: AssetsDir(),
		CRDDirectoryPaths:     []string{CRDDir()},
		ErrorIfCRDPathMissing: true,
		Scheme:                e.Scheme,
	}
	var etcdOut, apiOut io.Writer = etcdLog, apiLog
	if os.Getenv("KUBEBUILDER_ATTACH_CONTROL_PLANE_OUTPUT") == "true" {
		etcdOut, apiOut = io.MultiWriter(etcdLog, os.Stderr), io.MultiWriter(apiLog, os.Stderr)
	}
	te.ControlPlane.Etcd = &envtest.Etcd{Out: etcdOut, Err: etcdOut}
	api := te.ControlPlane.GetAPIServer()
	// A CertDir of our own (not a random one that envtest deletes on Stop)
	// keeps the serving certificate, its CA and the port across
	// StopAPIServer/StartAPIServer, so Config and Kubeconfig stay valid.
	api.CertDir = certDir
	api.Out, api.Err = apiOut, apiOut
	// kube-apiserver 1.37 refuses a loopback advertise address unless the
	// endpoint reconciler is off; without it, a host or network namespace
	// with no default route cannot start the apiserver.
	api.Configure().
		Set("advertise-address", "127.0.0.1").
		Set("endpoint-reconciler-type", "none").
		// Clients holding watches (informers) keep them open for up to
		// --min-request-timeout (30 min); without a watch termination grace
		// period kube-apiserver's graceful shutdown waits on them past
		// envtest's 20 s stop timeout. With it, the apiserver ends its
		// watches and exits in about a second (measured with an informer
		// and a raw watch open).
		Set("shutdown-watch-termination-grace-period", "1s").
		Set("shutdown-delay-duration", "0s")
	for k, v := range e.opts.flags {
		api.Configure().Set(k, v)
	}
	// envtest copies this to the apiserver's (and etcd's) stop timeout.
	te.ControlPlaneStopTimeout = e.opts.stopGrace
	e.Environment = te
	// envtest logs through controller-runtime's logger, which, never set,
	// prints a stack ("log.SetLogger(...) was never called") into every
	// test package's output that starts one; a component under test that
	// sets its own (internal/platform's Kubernetes rack) replaces this.
	ctrllog.SetLogger(logr.Discard())
	cfg, err := te.Start()
	if err != nil {
		return fmt.Errorf("k8stest: starting envtest: %w%s", err, e.logTail())
	}
	e.Config = cfg
	e.Kubeconfig = filepath.Join(e.dir, "kubeconfig")
	if err := os.WriteFile(e.Kubeconfig, te.KubeConfig, 0o600); err != nil {
		return err
	}
	e.Client, err = client.New(cfg, client.Options{Scheme: e.Scheme})
	if err != nil {
		return err
	}
	e.StartDuration = time.Since(t0)
	return nil
}

// logTail returns the last lines of the control plane's logs, for errors.
func (e *Env) logTail() string {
	var b strings.Builder
	for _, name := range []string{"kube-apiserver.log", "etcd.log"} {
		data, err := os.ReadFile(filepath.Join(e.dir, name))
		if err != nil || len(data) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 20 {
			lines = lines[len(lines)-20:]
		}
		fmt.Fprintf(&b, "\n--- last lines of %s ---\n%s", name, strings.Join(lines, "\n"))
	}
	return b.String()
}

// LogDir is the directory holding etcd.log and kube-apiserver.log (removed by Stop).
func (e *Env) LogDir() string { return e.dir }

// StopAPIServer stops kube-apiserver and leaves etcd running with its data:
// clients see connection refused until StartAPIServer. It works with
// clients holding watches: the apiserver ends them (see start), and if its
// shutdown still takes longer than APIServerStopGrace, envtest kills it and
// StopAPIServer waits until the process is gone and its port is free (and
// counts it in Killed) instead of failing.
func (e *Env) StopAPIServer() error {
	api := e.Environment.ControlPlane.GetAPIServer()
	pid := apiserverPID(api)
	t0 := time.Now()
	err := api.Stop()
	if err != nil {
		// envtest sent SIGKILL after its stop timeout but does not wait for
		// the process. (Its next Start makes a new process state, so the
		// apiserver starts again once the old one is gone.)
		if werr := waitGone(pid, e.Config.Host, 10*time.Second); werr != nil {
			return fmt.Errorf("k8stest: stopping kube-apiserver: %w; %v%s", err, werr, e.logTail())
		}
		e.Killed++
	}
	e.StopDurations = append(e.StopDurations, time.Since(t0))
	return nil
}

// apiserverPID is the pid of envtest's kube-apiserver process, read by
// reflection (envtest does not export it); 0 if not found.
func apiserverPID(api any) (pid int) {
	defer func() {
		if recover() != nil {
			pid = 0
		}
	}()
	ps := reflect.ValueOf(api).Elem().FieldByName("processState")
	if !ps.IsValid() || ps.IsNil() {
		return 0
	}
	cmd := ps.Elem().FieldByName("Cmd")
	if cmd.IsNil() {
		return 0
	}
	proc := cmd.Elem().FieldByName("Process")
	if proc.IsNil() {
		return 0
	}
	return int(proc.Elem().FieldByName("Pid").Int())
}

// waitGone waits until process pid has exited (and been reaped: envtest
// waits for it) and host's port refuses connections.
func waitGone(pid int, host string, timeout time.Duration) error {
	u, err := url.Parse(host)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		alive := pid > 0 && syscall.Kill(pid, 0) == nil
		listening := false
		if !alive {
			if c, err := net.DialTimeout("tcp", u.Host, 200*time.Millisecond); err == nil {
				c.Close()
				listening = true
			}
		}
		switch {
		case !alive && !listening:
			return nil
		case time.Now().After(deadline) && alive:
			return fmt.Errorf("kube-apiserver (pid %d) still running %v after SIGKILL", pid, timeout)
		case time.Now().After(deadline):
			return fmt.Errorf("%s still accepts connections %v after kube-apiserver was killed", u.Host, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// StartAPIServer starts kube-apiserver again (same port, certificates and
// etcd data) after StopAPIServer and waits until it serves the KubeVirt,
// CDI and Multus resources again.
func (e *Env) StartAPIServer() error {
	api := e.Environment.ControlPlane.GetAPIServer()
	if err := api.Start(); err != nil {
		return fmt.Errorf("k8stest: restarting kube-apiserver: %w%s", err, e.logTail())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lists := []client.ObjectList{&kubevirtv1.VirtualMachineInstanceList{}, &cdiv1.DataVolumeList{}, &nadv1.NetworkAttachmentDefinitionList{}}
	var last error
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for _, l := range lists {
			if last = e.Client.List(ctx, l, client.Limit(1)); last != nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("k8stest: kube-apiserver restarted but does not serve the CRDs: %w (last: %v)%s", err, last, e.logTail())
	}
	return nil
}

// RestartAPIServer is StopAPIServer followed by StartAPIServer.
func (e *Env) RestartAPIServer() error {
	if err := e.StopAPIServer(); err != nil {
		return err
	}
	return e.StartAPIServer()
}

// Stop stops the apiserver, then etcd, and removes the temporary files. It
// may be called more than once.
func (e *Env) Stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return
	}
	e.stopped = true
	if e.Environment != nil {
		// envtest stops the apiserver before etcd (the other order hangs).
		if err := e.Environment.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "k8stest: stopping the control plane: %v\n", err)
		}
	}
	for _, f := range e.logs {
		f.Close()
	}
	if e.dir != "" && os.Getenv("COSMICAC_K8STEST_KEEP") == "" {
		os.RemoveAll(e.dir)
	}
}

var shared struct {
	mu  sync.Mutex
	env *Env
	err error
}

// Shared returns the test binary's shared control plane, starting it on the
// first call; stop it with StopShared in TestMain. Tests that stop the
// apiserver must not run in parallel with others using it (or use Start).
// It skips t if the binaries are missing (fails it under CI).
func Shared(t testing.TB) *Env {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.env == nil && shared.err == nil {
		shared.env, _, shared.err = StartShared()
		if shared.err == nil {
			t.Logf("k8stest: shared control plane started in %v", shared.env.StartDuration.Round(time.Millisecond))
		}
	}
	if shared.err != nil {
		skipOrFail(t, shared.err)
	}
	return shared.env
}

// StopShared stops the control plane that Shared started, if any.
func StopShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.env != nil {
		shared.env.Stop()
		shared.env = nil
	}
}
