#!/usr/bin/env bash
# The serving path's benchmark job (docs/benchmarks.md, "Inference" and
# "Fabric"): not part of the test suite, which never asserts a timing. It
# installs nginx 1.22 from Debian's apt when it is missing (as root; the
# inference harness compares CosmicAC's two hops with one nginx, with two,
# and with two that have TLS between them, as the proxy and the agent have,
# beside Go byte relays with and without TLS, in the same run, and says so
# when nginx is absent), then runs, one after the other so that nothing else
# shares the two cores:
#
#   - the inference harness with a 2 ms time to first token, then CPU-bound
#     (every path in one table, with the CPU it ran on and the load average);
#   - the fabric's 1 KiB round trip beside plain TCP, TLS alone and two
#     thread wake-ups.
#   - the proxy's per-request benchmarks (a whole request beside the direct
#     runtime, the key check, the request's head, the headers' copy, the
#     prefix policy's pick);
#   - on the real engine (hack/build-llama.sh's llama-server, built first
#     when missing): streams through the proxy beside direct, the ideal
#     baselines and nginx (BenchmarkLlamaStreams), and the two routing policies on
#     three replicas (BenchmarkPrefixRouting), autoscaling under a load
#     ramp beside fixed replica counts (BenchmarkAutoscale; docs/benchmarks.md,
#     "Prefix-cache-aware routing" and "Autoscaling");
#   - a volume copied in from the real S3 server (hack/build-s3.sh's) with
#     presigned requests beside minio-go's own client (BenchmarkPull;
#     docs/benchmarks.md, "Data sync").
#
# Usage: hack/bench.sh [more go test flags for the two harness runs]
# Output goes to stdout; keep it with `hack/bench.sh | tee bench.txt`.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[bench %s] %s\n' "$(date +%T)" "$*" >&2; }

if ! command -v nginx >/dev/null 2>&1 && [[ ! -x /usr/sbin/nginx ]]; then
  if [[ $(id -u) == 0 ]]; then
    log "installing nginx (Debian's, the baseline)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends nginx >/dev/null
    # The package starts a system nginx on port 80; the harness runs its own.
    systemctl stop nginx >/dev/null 2>&1 || pkill -x nginx || true
  else
    log "nginx is not installed (apt-get install nginx, as root): its paths are left out"
  fi
fi
export PATH=$PATH:/usr/sbin

log "inference, 2 ms time to first token"
COSMICAC_BENCH=1 COSMICAC_BENCH_TTFT_US=2000 COSMICAC_BENCH_SEQ=200 \
  go test -count=1 -run TestBenchInference -v "$@" ./internal/inferproxy/
log "inference, the runtime answering at once (CPU-bound)"
COSMICAC_BENCH=1 go test -count=1 -run TestBenchInference -v "$@" ./internal/inferproxy/
log "fabric, 1 KiB round trip"
go test -run '^$' -bench 'RoundTrip1KiB$' -benchtime 2s -count 2 ./internal/fabric
log "the proxy's per-request pieces"
go test -run '^$' -bench 'BenchmarkRequest$|BenchmarkRequestHead|BenchmarkKeyCheck' -count 3 ./internal/inferproxy/
go test -run '^$' -bench 'BenchmarkCopyHeaders' -count 3 ./internal/hop/
go test -run '^$' -bench 'BenchmarkPrefixPick' -count 3 ./internal/inferproxy/
go test -run '^$' -bench 'BenchmarkMeter' -count 3 ./internal/inferproxy/
log "the real engine (llama.cpp): streams, then the routing policies"
COSMICAC_LLAMA_SERVER=${COSMICAC_LLAMA_SERVER:-$(hack/build-llama.sh --print-dest)/bin/llama-server}
[[ -x $COSMICAC_LLAMA_SERVER ]] || hack/build-llama.sh
export COSMICAC_LLAMA_SERVER COSMICAC_BENCH_LLAMA_THREADS=${COSMICAC_BENCH_LLAMA_THREADS:-1}
go test -run '^$' -bench 'LlamaStreams' -benchtime 60x -timeout 30m ./internal/cosmictest
go test -run '^$' -bench 'PrefixRouting' -benchtime 1x -count 3 -timeout 30m ./internal/cosmictest
COSMICAC_S3_SERVER=${COSMICAC_S3_SERVER:-$(hack/build-s3.sh --print-dest)/versitygw} COSMICAC_BENCH_SYNC_MB=1024 \
  go test -run '^$' -bench 'Pull' -benchtime 2x -timeout 20m ./internal/datasync
log "the real engine (llama.cpp): autoscaling under a ramp, and wakes from zero"
go test -run '^$' -bench 'BenchmarkAutoscale$' -benchtime 1x -timeout 30m ./internal/cosmictest
