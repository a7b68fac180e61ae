#!/usr/bin/env bash
# The whole test suite, as the README gives it: the test kube-apiserver,
# Loki, llama.cpp's llama-server and the S3 server (built once, cached
# outside the checkout), formatting, a
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

# What fails in seconds fails before anything is built.
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [[ -n "$unformatted" ]]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
if ! go mod tidy -diff; then
  echo "go.mod or go.sum is not tidy: run go mod tidy"; exit 1
fi

# Six things the tests need are built once per machine and cached outside
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
# - The Versity S3 Gateway (versitygw), the real S3 server of the data
#   path's tests (s3test.Start; hack/build-s3.sh, about 2 minutes cold on
#   2 cores). COSMICAC_S3_SERVER set means those tests run (under CI, a
#   missing server fails them); one given is used as it is.
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
if [[ -z "${COSMICAC_S3_SERVER:-}" ]]; then
  s3_dir=$(hack/build-s3.sh --print-dest)
  export COSMICAC_S3_SERVER=$s3_dir/versitygw
fi
STATICCHECK_VERSION=v0.8.2
sc_dir=${COSMICAC_TOOLS:-$HOME/.cache/cosmicac/tools}/staticcheck-$STATICCHECK_VERSION

# The test run's build flags (the race detector; hack/buildflags.sh says
# which package goes without it, and why).
source hack/buildflags.sh

prep_dir=$(mktemp -d)
# cleanup ends, on every exit of this script (a failure, a signal), what it
# started and what they started: the prep steps still running, go test and
# the web checks, each a process group of its own.
# A group that has ended already is no error: under `set -e` a failed kill
# here would make the run's exit status 1 whatever the tests said (the
# status of an EXIT trap's failing command is the script's).
cleanup() {
  local f
  for f in "$prep_dir"/*.pid; do
    if [[ -e $f ]]; then kill -TERM -- -"$(<"$f")" 2>/dev/null || true; fi
  done
  if [[ -n ${gotest_pid:-} ]]; then kill -TERM -- -"$gotest_pid" 2>/dev/null || true; fi
  if [[ -n ${web_pid:-} ]]; then kill -TERM -- -"$web_pid" 2>/dev/null || true; fi
  rm -rf "$prep_dir"
  return 0
}
trap cleanup EXIT
declare -A prep_pid=()
# children_cpu sets cpu_s to the CPU seconds (user and system) of the
# processes this shell has waited for, theirs included: what a build cost,
# where its wall time says how long it waited for the machine too. (Not
# called in $(...): `times` there would count that subshell's children.)
children_cpu() {
  local f u s
  f=$(mktemp)
  times >"$f"
  read -r u s < <(tail -1 "$f")
  rm -f "$f"
  cpu_s=$(awk -v u="$u" -v s="$s" 'function sec(x, a) { split(x, a, "m"); sub("s", "", a[2]); return a[1] * 60 + a[2] }
    BEGIN { printf "%d", sec(u) + sec(s) }')
}
# prep NAME CMD...: runs the command CMD (not a shell function) in the
# background, in a process group of its own (which cleanup ends, while it
# runs, if this script ends first), its stdout and stderr in
# $prep_dir/NAME.out and .err.
prep() {
  local name=$1
  shift
  ( t0=$SECONDS
    setsid "$@" >"$prep_dir/$name.out" 2>"$prep_dir/$name.err" &
    echo $! >"$prep_dir/$name.pid"
    status=0
    wait $! || status=$?
    rm -f "$prep_dir/$name.pid"
    (( status == 0 )) || exit $status
    children_cpu
    log "$name done after $((SECONDS - t0))s, $cpu_s CPU-s" ) &
  prep_pid[$name]=$!
}
# prepared NAME: waits for NAME; on failure prints its output and stops,
# once the other prep steps have run to their end (so that the builds fill
# their caches for the next run, and nothing is left running).
prepared() {
  if ! wait "${prep_pid[$1]}"; then
    log "$1 failed:"
    cat "$prep_dir/$1.out" "$prep_dir/$1.err" >&2
    log "waiting for the other prep steps to end"
    wait
    exit 1
  fi
}
prep test-apiserver hack/build-test-apiserver.sh "$KUBEBUILDER_ASSETS"
[[ -n "${loki_dir:-}" ]] && prep loki hack/build-loki.sh "$loki_dir"
[[ -n "${llama_dir:-}" ]] && prep llama.cpp hack/build-llama.sh "$llama_dir"
[[ -n "${s3_dir:-}" ]] && prep s3 hack/build-s3.sh "$s3_dir"
# vet runs beside the builds too: on empty caches its compile of the tree,
# with the test run's build flags, is the tests' own, and fills the builds'
# downloads and single-threaded links. Its findings, if any, are printed as
# a failed build's output is. staticcheck is built (pinned) meanwhile, and
# run once vet is done (below).
prep vet go vet "${buildflags[@]}" ./...
prep staticcheck-build bash -c '[[ -x "$1/staticcheck" ]] || env GOBIN="$1" go install "honnef.co/go/tools/cmd/staticcheck@$2"' - "$sc_dir" "$STATICCHECK_VERSION"
[[ $(id -u) == 0 ]] && prep vm-image hack/vm-image.sh
for name in "${!prep_pid[@]}"; do
  prepared "$name"
done
# staticcheck runs beside go test: its `go list -export`, given the test
# run's build flags, finds the packages vet compiled (without them it
# compiled the whole tree a second time, without the race detector), and
# nothing waits for it but the end. Its findings fail the run there.
prep staticcheck env GOFLAGS="${GOFLAGS:+$GOFLAGS }$buildflags_env" "$sc_dir/staticcheck" ./...
if [[ -n "${prep_pid[vm-image]:-}" ]]; then
  COSMICAC_VM_IMAGE=$(tail -1 "$prep_dir/vm-image.out")
  export COSMICAC_VM_IMAGE
  log "VM base image: $COSMICAC_VM_IMAGE"
else
  log "not root: no VM base image is built (hack/vm-image.sh needs root); the QEMU rack's end-to-end tests skip"
fi
log "test kube-apiserver and etcd: $KUBEBUILDER_ASSETS; Loki: $COSMICAC_LOKI_BIN; llama-server: $COSMICAC_LLAMA_SERVER; S3 server: $COSMICAC_S3_SERVER"

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

# What the run leaves to read afterwards (the tests' log, the browser
# tests' screenshots) goes to a directory of this run's own, so that two
# runs on one machine do not write over each other.
COSMICAC_TEST_OUT=${COSMICAC_TEST_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/cosmicac-test.XXXXXX")}
export COSMICAC_TEST_OUT
mkdir -p "$COSMICAC_TEST_OUT"
log "go test ${buildflags[*]} ./... (its log: $COSMICAC_TEST_OUT/go-test.log)"
# The slowest packages first: go test runs packages in the order it is
# given them, -p (the number of CPUs) at a time, so the VM tests' minutes of
# emulated boots start at once rather than run on alone at the end
# (./... is in import-path order: vms started 9 minutes in, and ran its
# last 5 alone). The order is by their time in CI, longest first; every
# other package follows in ./...'s order.
slow=(./internal/cli/systest/vms ./internal/cosmictest ./internal/cli/systest ./internal/monitor ./internal/appnode ./internal/cli)
mapfile -t pkgs < <(go list ./... | grep -vxF -f <(printf '%s\n' "${slow[@]/#./$(go list -m)}"))
# -timeout is a test binary's bound on a hang (it then prints every
# goroutine), and the only fixed one the VM tests have over them as a whole
# (internal/cosmictest's envContext): 60 minutes, for the VM package takes
# 10 warm and more than twice that beside a CPU-heavy process.
# -vet=off: the whole of vet ran above, on the same files. It runs in a
# process group of its own, killed if this script ends first; its output
# goes to its log and, as it comes, here.
gotest_log=$COSMICAC_TEST_OUT/go-test.log
: >"$gotest_log" # before tail opens it: go test's redirection is made in its own process
setsid go test "${buildflags[@]}" -vet=off -count=1 -timeout 60m "${slow[@]}" "${pkgs[@]}" >"$gotest_log" 2>&1 &
gotest_pid=$!
tail -n +1 -f --pid="$gotest_pid" "$gotest_log" &
tail_pid=$!

# The web interface: its committed build is what web/ builds (reproducible
# from the lock file), and the browser tests in Chromium against a real
# `cosmicac up` (hack/webui.sh). They run beside the end of go test, once
# the VM tests (the first package, whose result go test prints first) are
# done: from there on go test leaves a third of the machine idle (its last
# packages wait more than they compute), and the browser tests, which
# mostly wait on a browser, fit there. Their output follows go test's.
vms_done='^(ok|FAIL|---)[[:space:]].*/internal/cli/systest/vms([[:space:]]|$)'
while kill -0 "$gotest_pid" 2>/dev/null && ! grep -qE "$vms_done" "$gotest_log"; do
  sleep 5
done
# A process group of its own too (node, `cosmicac up`, Chromium), killed
# with go test's if this script ends first.
web_log=$COSMICAC_TEST_OUT/web.log
export -f log
setsid bash -c 'set -e
  log "web interface: reproducible build (hack/webui.sh --check)"
  hack/webui.sh --check
  log "web interface: browser tests (hack/webui.sh --test)"
  hack/webui.sh --test' >"$web_log" 2>&1 &
web_pid=$!
web_status=0
wait "$web_pid" || web_status=$?
gotest_status=0
wait "$gotest_pid" || gotest_status=$?
wait "$tail_pid" || true
cat "$web_log"
staticcheck_status=0
if ! wait "${prep_pid[staticcheck]}"; then
  staticcheck_status=1
  log "staticcheck failed:"
  cat "$prep_dir/staticcheck.out" "$prep_dir/staticcheck.err" >&2
fi
children_cpu
log "done: $cpu_s CPU-s in all (the builds above, go test, the web checks)"
if (( gotest_status != 0 )); then
  log "go test failed (exit $gotest_status): its log is $gotest_log"
fi
if (( web_status != 0 )); then
  log "the web interface's checks failed (exit $web_status): their log is $web_log"
fi
if (( gotest_status != 0 || web_status != 0 || staticcheck_status != 0 )); then
  exit 1
fi
