#!/usr/bin/env bash
# stress.sh: hunt flaky tests the way CI's contention finds them.
#
#   hack/stress.sh [-n PARALLEL] [-c COUNT] [-p GOMAXPROCS] [-r REGEXP] PACKAGE...
#
# Builds each package's test binary with the race detector (as hack/test.sh
# does: the SQLite engine uninstrumented), then runs
# PARALLEL copies of it at once (each -test.count=COUNT) with GOMAXPROCS
# above the machine's cores, so that goroutines interleave as they do on a
# busy CI runner (-r runs only the tests REGEXP matches). Prints, per package, how many copies passed and every
# failing test. Outputs stay in $STRESS_DIR (default: a temp dir).
#
# Example: hack/stress.sh -n 4 -c 3 ./internal/monitor ./internal/cosmictest
set -euo pipefail

par=3 count=2 procs=8 run=.
while getopts "n:c:p:r:" o; do
	case $o in
	n) par=$OPTARG ;;
	c) count=$OPTARG ;;
	p) procs=$OPTARG ;;
	r) run=$OPTARG ;;
	*) echo "usage: $0 [-n PARALLEL] [-c COUNT] [-p GOMAXPROCS] [-r REGEXP] PACKAGE..." >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { echo "usage: $0 [-n PARALLEL] [-c COUNT] [-p GOMAXPROCS] [-r REGEXP] PACKAGE..." >&2; exit 2; }

cd "$(dirname "$0")/.."
source hack/buildflags.sh
out=${STRESS_DIR:-$(mktemp -d)}
mkdir -p "$out"
if [ -z "${KUBEBUILDER_ASSETS:-}" ]; then
	KUBEBUILDER_ASSETS=$(ls -d "$HOME"/.cache/cosmicac/envtest/k8s-* 2>/dev/null | head -1 || true)
	export KUBEBUILDER_ASSETS
fi
status=0
for pkg in "$@"; do
	name=$(echo "$pkg" | tr '/.' '__')
	bin="$out/$name.test"
	go test "${buildflags[@]}" -c -o "$bin" "$pkg"
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for i in $(seq 1 "$par"); do
		# A background job of a non-interactive shell starts with SIGINT
		# ignored, and the PTY tests' shells would inherit that: python
		# resets it, as `go test` does.
		(cd "$dir" && CI=${CI:-true} GOMAXPROCS=$procs python3 -c \
			'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); signal.signal(signal.SIGQUIT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' \
			"$bin" -test.count="$count" -test.run="$run" -test.timeout=30m >"$out/$name.$i.txt" 2>&1) &
	done
	wait
	passed=$(grep -lx PASS "$out/$name".*.txt | wc -l || true)
	echo "$pkg: $passed of $par copies passed (each -count=$count, GOMAXPROCS=$procs)"
	if [ "$passed" -ne "$par" ]; then
		status=1
		grep -h -- "^--- FAIL\|^panic:\|WARNING: DATA RACE" "$out/$name".*.txt | sort | uniq -c || true
	fi
done
echo "outputs in $out"
exit $status
