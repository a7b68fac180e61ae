#!/usr/bin/env bash
# The whole test suite, as the README gives it: the test kube-apiserver
# and Loki (built once from Go modules, cached outside the checkout), formatting, a
# tidy go.mod, vet, staticcheck (pinned, cached likewise), and every test
# with the race detector. CI (.ci/run) installs the system
# packages first (iproute2 for the network-namespace tests).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[test %s] %s\n' "$(date +%T)" "$*" >&2; }

# kube-apiserver and etcd for internal/k8stest and the Kubernetes worker's
# tests, built by hack/build-test-apiserver.sh into a versioned directory
# outside the checkout: the first run on a machine takes 5-12 minutes, later
# runs find it and do nothing. KUBEBUILDER_ASSETS set means these tests fail
# rather than skip (docs/testing-kubernetes.md).
KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS:-$(hack/build-test-apiserver.sh --print-dest)}
export KUBEBUILDER_ASSETS
t0=$SECONDS
timeout 25m hack/build-test-apiserver.sh "$KUBEBUILDER_ASSETS"
log "test kube-apiserver and etcd ready in $KUBEBUILDER_ASSETS after $((SECONDS - t0))s"

# A real Loki for the monitor's integration tests (internal/monitor,
# lokitest.Start), built by hack/build-loki.sh from the Go module proxy
# into a versioned directory outside the checkout: the first run on a
# machine takes about 15 minutes on 2 cores, later runs find it and do
# nothing. COSMICAC_LOKI_BIN set means those tests run (under CI, a
# missing Loki fails them); a COSMICAC_LOKI_BIN given is used as it is.
if [[ -z "${COSMICAC_LOKI_BIN:-}" ]]; then
  loki_dir=$(hack/build-loki.sh --print-dest)
  t0=$SECONDS
  timeout 30m hack/build-loki.sh "$loki_dir"
  export COSMICAC_LOKI_BIN=$loki_dir/loki
  log "Loki ready in $loki_dir after $((SECONDS - t0))s"
fi

# The PostgreSQL store's tests start a real PostgreSQL (initdb in a temp
# dir, a loopback port; as the user nobody when run as root) from the server
# binaries on PATH or in /usr/lib/postgresql/*/bin (hack/install-deps.sh
# installs postgresql-15); COSMICAC_PG_BIN names another directory. Under
# CI ($CI set) a missing server fails those tests instead of skipping them.
if pg_bin=$(command -v postgres || compgen -G '/usr/lib/postgresql/*/bin/postgres' | tail -1); then
  log "PostgreSQL for the store's tests: $pg_bin"
else
  log "no PostgreSQL server binaries: the PostgreSQL store's tests skip (under CI, fail)"
fi

unformatted=$(gofmt -l $(git ls-files '*.go'))
if [[ -n "$unformatted" ]]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
if ! go mod tidy -diff; then
  echo "go.mod or go.sum is not tidy: run go mod tidy"; exit 1
fi
go vet ./...

# staticcheck, built once from the Go module proxy at a pinned version and
# cached outside the checkout.
STATICCHECK_VERSION=v0.8.2
sc_dir=${COSMICAC_TOOLS:-$HOME/.cache/cosmicac/tools}/staticcheck-$STATICCHECK_VERSION
if [[ ! -x "$sc_dir/staticcheck" ]]; then
  log "building staticcheck $STATICCHECK_VERSION into $sc_dir"
  GOBIN="$sc_dir" go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
log "staticcheck ./..."
"$sc_dir/staticcheck" ./...
# The QEMU rack's base VM image (docs/vm-image.md), built once from
# Debian's packages and cached outside the checkout by content: the first
# run on a machine takes about 3 minutes, later ones find it. Building it
# needs root (mmdebstrap); elsewhere the QEMU rack's end-to-end test skips
# and says so, and under CI it fails.
if [[ $(id -u) == 0 ]]; then
  t0=$SECONDS
  COSMICAC_VM_IMAGE=$(timeout 20m hack/vm-image.sh)
  export COSMICAC_VM_IMAGE
  log "VM base image ready in $COSMICAC_VM_IMAGE after $((SECONDS - t0))s"
else
  log "not root: no VM base image is built (hack/vm-image.sh needs root); the QEMU rack's end-to-end tests skip"
fi
log "go test -race ./..."
go test -race -count=1 -timeout 40m ./... 2>&1 | tee /tmp/cosmicac-test.log

# The web interface: its committed build is what web/ builds (reproducible
# from the lock file), and the browser tests in Chromium against a real
# `cosmicac up` (hack/webui.sh).
log "web interface: reproducible build (hack/webui.sh --check)"
hack/webui.sh --check
log "web interface: browser tests (hack/webui.sh --test)"
hack/webui.sh --test
