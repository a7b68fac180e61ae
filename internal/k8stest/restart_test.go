package k8stest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/cosmicac/cosmicac/internal/waittest"
)

// TestRestartWithWatches stops and starts the apiserver while clients hold
// watches open (an informer, as the worker's, and a raw watch): the stop
// must not wait for the watches, the raw watch ends, the port refuses
// connections, and after the start the informer catches up by itself. Twice,
// to show the apiserver that StartAPIServer started stops as well.
func TestRestartWithWatches(t *testing.T) {
	env := Start(t)
	restartWithWatches(t, env, 2)
	// How long the graceful shutdown takes is the machine's (a loaded one
	// may need the kill): said, not asserted.
	t.Logf("kube-apiserver was killed in %d of %d stops (durations %v; grace %v)",
		env.Killed, len(env.StopDurations), env.StopDurations, APIServerStopGrace)
}

// TestStopKillsSlowShutdown: when kube-apiserver's graceful shutdown does
// not end (here without the watch termination grace period, so the
// informers' watches hold it), StopAPIServer kills it after the grace,
// waits until it is gone, and StartAPIServer starts it again.
func TestStopKillsSlowShutdown(t *testing.T) {
	env, stop, err := startShared(options{stopGrace: 2 * time.Second,
		flags: map[string]string{"shutdown-watch-termination-grace-period": "0s"}})
	if err != nil {
		skipOrFail(t, err)
	}
	t.Cleanup(stop)
	restartWithWatches(t, env, 1)
	if env.Killed != 1 {
		t.Errorf("Killed = %d (stop took %v); want the shutdown killed", env.Killed, env.StopDurations)
	}
}

func restartWithWatches(t *testing.T, env *Env, rounds int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	const wns = "cosmicac-watch"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: wns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createCM := func(name string) {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: wns}}
		if _, err := cs.CoreV1().ConfigMaps(wns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createCM("before")

	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(wns))
	cms := factory.Core().V1().ConfigMaps()
	nodes := factory.Core().V1().Nodes() // a cluster-scoped watch too
	cms.Informer()
	nodes.Informer()
	stopInformers := make(chan struct{})
	defer func() { close(stopInformers); factory.Shutdown() }()
	factory.Start(stopInformers)
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("informer for %v did not sync", typ)
		}
	}
	seen := func(name string) bool { _, err := cms.Lister().ConfigMaps(wns).Get(name); return err == nil }

	hostPort := func() string {
		u, err := url.Parse(env.Config.Host)
		if err != nil {
			t.Fatal(err)
		}
		return u.Host
	}()

	for round := 1; round <= rounds; round++ {
		// A raw watch on its own connection (a second clientset, so not
		// multiplexed with the informers' HTTP/2 connection).
		rawCS := kubernetes.NewForConfigOrDie(env.Config)
		list, err := rawCS.CoreV1().ConfigMaps(wns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		raw, err := rawCS.CoreV1().ConfigMaps(wns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}

		t0 := time.Now()
		if err := env.StopAPIServer(); err != nil {
			t.Fatalf("round %d: StopAPIServer: %v", round, err)
		}
		stopped := time.Since(t0)
		t.Logf("round %d: apiserver stopped with watches open in %v", round, stopped.Round(time.Millisecond))
		if c, err := net.DialTimeout("tcp", hostPort, time.Second); err == nil {
			c.Close()
			t.Fatalf("round %d: %s still accepts connections after StopAPIServer", round, hostPort)
		}
		if _, err := cs.CoreV1().ConfigMaps(wns).Get(ctx, "before", metav1.GetOptions{}); err == nil {
			t.Fatalf("round %d: Get succeeded with the apiserver stopped", round)
		}
		// The raw watch has ended (its channel closes, perhaps after an error event).
		drain := time.After(10 * time.Second)
	drained:
		for {
			select {
			case ev, ok := <-raw.ResultChan():
				if !ok {
					break drained
				}
				if ev.Type != watch.Error {
					t.Fatalf("round %d: event %v on the raw watch during the stop", round, ev.Type)
				}
			case <-drain:
				t.Fatalf("round %d: the raw watch is still open 10s after the stop", round)
			}
		}
		raw.Stop()

		t0 = time.Now()
		if err := env.StartAPIServer(); err != nil {
			t.Fatalf("round %d: StartAPIServer: %v", round, err)
		}
		t.Logf("round %d: apiserver started again (serving the CRDs) in %v", round, time.Since(t0).Round(time.Millisecond))

		// The informer relists and watches again by itself.
		name := fmt.Sprintf("after-%d", round)
		createCM(name)
		t0 = time.Now()
		// The reflector's backoff, grown while the apiserver was away, may
		// hold its relist back longer than waittest.Timeout.
		waittest.Within(t, 60*time.Second, func() bool { return seen(name) }, "round %d: the informer to see %s after the restart", round, name)
		t.Logf("round %d: the informer saw a new object %v after the start", round, time.Since(t0).Round(time.Millisecond))
		if !seen("before") {
			t.Fatalf("round %d: the informer lost an object", round)
		}
	}
}
