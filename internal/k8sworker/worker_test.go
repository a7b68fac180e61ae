package k8sworker

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
)

func TestNewRefusesBadConfig(t *testing.T) {
	cfg := DefaultRackConfig()
	cfg.Namespace = "Not_A_Namespace"
	cfg.Client.QPS = 0
	_, err := New(cfg, &rest.Config{Host: "https://127.0.0.1:1"}, &fakeReporter{}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "namespace") || !strings.Contains(err.Error(), "client.qps") {
		t.Fatalf("New = %v, want namespace and client.qps errors", err)
	}
	if _, err := New(DefaultRackConfig(), nil, &fakeReporter{}, nil, nil); err == nil {
		t.Fatal("New without a client config succeeded")
	}
}

func TestNewRateLimitsFromConfig(t *testing.T) {
	cfg := DefaultRackConfig()
	cfg.Client = ClientConfig{QPS: 123, Burst: 456}
	rc := limited(&rest.Config{Host: "https://127.0.0.1:1"}, cfg.Client)
	if rc.QPS != 123 || rc.Burst != 456 || rc.RateLimiter == nil || rc.RateLimiter.QPS() != 123 {
		t.Fatalf("rate limit %v/%v %v", rc.QPS, rc.Burst, rc.RateLimiter)
	}
	w, err := New(cfg, &rest.Config{Host: "https://127.0.0.1:1"}, &fakeReporter{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w.Config().Client != cfg.Client {
		t.Fatal("config not kept")
	}
}

func TestStateRoundTrip(t *testing.T) {
	r := cosmic.NewReason(cosmic.ReasonVMICrashed, "VMI x failed")
	st := replicaState{
		Desired:     desiredFailed,
		Reservation: cosmic.Reservation{JobID: "j", Rack: "k8s-us-1", Replica: 2, Nodes: []cosmic.NodeAlloc{{Node: "n1", GPUs: []int{0, 1}}}},
		Replacing:   []string{"uid-1", "uid-2"},
		Failure:     &r,
		Version:     42,
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
	st.setOn(s)
	got, ok := stateOf(s)
	if !ok || got.Desired != st.Desired || !sameReservation(got.Reservation, st.Reservation) ||
		strings.Join(got.Replacing, ",") != "uid-1,uid-2" || *got.Failure != r || got.Version != 42 {
		t.Fatalf("stateOf(setOn(%+v)) = %+v, %v", st, got, ok)
	}
	if _, ok := stateOf(&corev1.Secret{}); ok {
		t.Fatal("a Secret without state has one")
	}
	// A merge patch removes what is unset.
	st.Failure, st.Replacing = nil, nil
	a := st.annotations()
	if v, ok := a[AnnotationFailure]; !ok || v != nil {
		t.Fatal("the failure annotation is not removed")
	}
}

func TestCurrentPrefersOwnWriteUntilCaughtUp(t *testing.T) {
	m := &replicaMem{seen: map[int]string{}}
	m.override = &replicaState{Desired: desiredStop, Version: 10}
	if st, _ := m.current(&replicaState{Desired: desiredRun, Version: 9}); st.Desired != desiredStop {
		t.Fatal("stale carrier won")
	}
	if st, _ := m.current(&replicaState{Desired: desiredStop, Version: 10}); st.Desired != desiredStop || m.override != nil {
		t.Fatal("caught-up carrier not taken")
	}
	if _, ok := m.current(nil); ok {
		t.Fatal("state out of nothing")
	}
}

func TestFabricError(t *testing.T) {
	gr := schema.GroupResource{Group: "kubevirt.io", Resource: "virtualmachineinstances"}
	for _, c := range []struct {
		err  error
		code string
	}{
		{apierrors.NewInvalid(schema.GroupKind{Group: "kubevirt.io", Kind: "VirtualMachineInstance"}, "x", nil), fabric.CodeBadRequest},
		{apierrors.NewForbidden(gr, "x", errors.New("rbac")), fabric.CodeInternal},
		{apierrors.NewServiceUnavailable("etcd"), fabric.CodeUnavailable},
		{errors.New("dial tcp: connection refused"), fabric.CodeUnavailable},
		{fabric.Errorf(codeConflict, "x"), codeConflict},
	} {
		if got := fabric.ErrorCode(fabricError("op", c.err)); got != c.code {
			t.Errorf("fabricError(%v) = %s, want %s", c.err, got, c.code)
		}
	}
	if !retryable(apierrors.NewConflict(gr, "x", errors.New("changed"))) || !retryable(apierrors.NewInternalError(errors.New("etcd"))) || retryable(apierrors.NewNotFound(gr, "x")) {
		t.Fatal("retryable")
	}
}

// TestTombstonesAreForgotten: a replica reported Gone keeps its tombstone
// long enough to ignore late informer events, then is forgotten, so a
// worker that has deleted many jobs does not keep them all.
func TestTombstonesAreForgotten(t *testing.T) {
	w := &Worker{gone: map[replicaKey]time.Time{}, now: time.Now}
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range 100 {
		w.tombstoneLocked(replicaKey{job: "old", replica: i}, t0)
	}
	w.tombstoneLocked(replicaKey{job: "recent"}, t0.Add(goneTTL/2))
	if len(w.gone) != 101 {
		t.Fatalf("%d tombstones within goneTTL, want 101", len(w.gone))
	}
	w.tombstoneLocked(replicaKey{job: "new"}, t0.Add(goneTTL+time.Minute))
	if _, ok := w.gone[replicaKey{job: "old"}]; ok || len(w.gone) != 2 {
		t.Fatalf("after goneTTL: %d tombstones (old kept: %v), want recent and new", len(w.gone), ok)
	}
}
