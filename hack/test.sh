#!/usr/bin/env bash
# The whole test suite, as the README gives it: the test kube-apiserver
# and Loki (built once from Go modules, cached outside the checkout), formatting, a
# tidy go.mod, vet, staticcheck (pinned, cached likewise), and every test
# with the race detector. It installs the system packages first
# (hack/install-deps.sh), as CI (.ci/run) does too.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[test %s] %s\n' "$(date +%T)" "$*" >&2; }

# The system packages the tests use, from Debian's apt when they are missing
# (as root; otherwise it names them and stops), as the README says: on a
# fresh machine this command alone sets everything up.
hack/install-deps.sh

# Five things the tests need are built once per machine and cached outside
# the checkout, each by its version or content; later runs find them and do
# nothing. On a machine with empty caches they are built side by side: each
# spends much of its time downloading (Go modules, Debian packages) or in a
# single-threaded link, so together they take little more than the longest
# (Loki) alone. None has a fixed time limit: on a loaded machine a cold
# build is merely slow, and CI's own limit bounds the run. Each logs when it is ready, with its time; one that fails
# stops the run, with its output, once the builds waited for before it end.
#
# - kube-apiserver and etcd for internal/k8stest and the Kubernetes worker's
#   tests (hack/build-test-apiserver.sh, 5-12 minutes cold). KUBEBUILDER_ASSETS
#   set means these tests fail rather than skip (docs/testing-kubernetes.md).
# - A real Loki for the monitor's integration tests (lokitest.Start;
#   hack/build-loki.sh, about 15 minutes cold on 2 cores). COSMICAC_LOKI_BIN
#   set means those tests run (under CI, a missing Loki fails them); a
#   COSMICAC_LOKI_BIN given is used as it is.
# - llama.cpp's llama-server, the real engine of the llama.cpp runtime's
#   tests (hack/build-llama.sh, from the source the npm package
#   node-llama-cpp ships; about 17 minutes cold on 2 cores).
#   COSMICAC_LLAMA_SERVER set means those tests run (under CI, a missing
#   engine fails them); one given is used as it is.
# - staticcheck, at a pinned version.
# - The QEMU rack's base VM image (docs/vm-image.md; hack/vm-image.sh, about
#   3 minutes cold). Building it needs root (mmdebstrap); elsewhere the QEMU
#   rack's end-to-end tests skip and say so, and under CI they fail.
KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS:-$(hack/build-test-apiserver.sh --print-dest)}
export KUBEBUILDER_ASSETS
if [[ -z "${COSMICAC_LOKI_BIN:-}" ]]; then
  loki_dir=$(hack/build-loki.sh --print-dest)
  export COSMICAC_LOKI_BIN=$loki_dir/loki
fi
if [[ -z "${COSMICAC_LLAMA_SERVER:-}" ]]; then
  llama_dir=$(hack/build-llama.sh --print-dest)
  export COSMICAC_LLAMA_SERVER=$llama_dir/bin/llama-server
fi
STATICCHECK_VERSION=v0.8.2
sc_dir=${COSMICAC_TOOLS:-$HOME/.cache/cosmicac/tools}/staticcheck-$STATICCHECK_VERSION

prep_dir=$(mktemp -d)
trap 'rm -rf "$prep_dir"' EXIT
declare -A prep_pid=()
# prep NAME CMD...: runs CMD in the background, its stdout and stderr in
# $prep_dir/NAME.out and .err.
prep() {
  local name=$1
  shift
  ( t0=$SECONDS
    if "$@" >"$prep_dir/$name.out" 2>"$prep_dir/$name.err"; then
      log "$name ready after $((SECONDS - t0))s"
    else
      exit $?
    fi ) &
  prep_pid[$name]=$!
}
# prepared NAME: waits for NAME; on failure prints its output and stops
# (the other builds run on to their end, filling their caches).
prepared() {
  if ! wait "${prep_pid[$1]}"; then
    log "$1 failed:"
    cat "$prep_dir/$1.out" "$prep_dir/$1.err" >&2
    exit 1
  fi
}
prep test-apiserver hack/build-test-apiserver.sh "$KUBEBUILDER_ASSETS"
[[ -n "${loki_dir:-}" ]] && prep loki hack/build-loki.sh "$loki_dir"
[[ -n "${llama_dir:-}" ]] && prep llama.cpp hack/build-llama.sh "$llama_dir"
[[ -x "$sc_dir/staticcheck" ]] || prep staticcheck env GOBIN="$sc_dir" go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
[[ $(id -u) == 0 ]] && prep vm-image hack/vm-image.sh
for name in "${!prep_pid[@]}"; do
  prepared "$name"
done
if [[ -n "${prep_pid[vm-image]:-}" ]]; then
  COSMICAC_VM_IMAGE=$(tail -1 "$prep_dir/vm-image.out")
  export COSMICAC_VM_IMAGE
  log "VM base image: $COSMICAC_VM_IMAGE"
else
  log "not root: no VM base image is built (hack/vm-image.sh needs root); the QEMU rack's end-to-end tests skip"
fi
log "test kube-apiserver and etcd: $KUBEBUILDER_ASSETS; Loki: $COSMICAC_LOKI_BIN; llama-server: $COSMICAC_LLAMA_SERVER"

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
# vet with -race: it compiles every dependency for its export data, and
# with the test run's build flags those are the test run's own compiles
# (on empty caches, one compile of the tree instead of two).
go vet -race ./...

log "staticcheck ./..."
"$sc_dir/staticcheck" ./...
# What the run leaves to read afterwards (the tests' log, the browser
# tests' screenshots) goes to a directory of this run's own, so that two
# runs on one machine do not write over each other.
COSMICAC_TEST_OUT=${COSMICAC_TEST_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/cosmicac-test.XXXXXX")}
export COSMICAC_TEST_OUT
mkdir -p "$COSMICAC_TEST_OUT"
log "go test -race ./... (its log: $COSMICAC_TEST_OUT/go-test.log)"
# -vet=off: the whole of vet ran above, on the same files.
go test -race -vet=off -count=1 -timeout 40m ./... 2>&1 | tee "$COSMICAC_TEST_OUT/go-test.log"

# The web interface: its committed build is what web/ builds (reproducible
# from the lock file), and the browser tests in Chromium against a real
# `cosmicac up` (hack/webui.sh).
log "web interface: reproducible build (hack/webui.sh --check)"
hack/webui.sh --check
log "web interface: browser tests (hack/webui.sh --test)"
hack/webui.sh --test
