#!/usr/bin/env bash
# build-loki.sh — build Loki from the Go module proxy (no release downloads)
# and install it into DEST:
#
#   DEST/loki   DEST/VERSION
#
# Usage:  hack/build-loki.sh [DEST_DIR]
#         export COSMICAC_LOKI_BIN=DEST_DIR/loki
#         hack/build-loki.sh --print-dest   # print the default DEST_DIR
#
# DEST_DIR defaults to $COSMICAC_LOKI_DIR, else
# ~/.cache/cosmicac/loki/loki-<LOKI_VERSION>: outside the checkout, so every
# clone on a machine shares one build. The monitor's Loki integration tests
# (internal/monitor/lokitest.Start) run it when COSMICAC_LOKI_BIN names it;
# hack/test.sh sets that. See docs/logs.md.
#
# The first build takes about 15 minutes on 2 cores and ~3 GB of Go
# module/build caches; the binary is ~220 MB. Later runs do nothing.
#
# Environment (all optional):
#   LOKI_VERSION  Loki version (default 3.7.8)
#   WORK_DIR      the module's source is copied here      (default DEST_DIR/.build)
#   FORCE=1       rebuild even if the binary is already present
#   GOFLAGS, GOMODCACHE, GOCACHE, GOPROXY are honoured as usual.
#
# Idempotent: if DEST/VERSION records the requested version and the binary
# is executable, it exits 0 without touching anything. A lock (DEST/.lock)
# makes a second run wait for the first.
#
# How it works: github.com/grafana/loki/v3 cannot be `go install`ed: its
# go.mod replaces github.com/grafana/loki/pkg/push with ./pkg/push (and
# pins seven more replacements), and replace directives of a dependency are
# ignored. So the module's own source is the build: it is downloaded from
# the proxy and copied into WORK_DIR, where its go.mod and go.sum hold. The
# module zip lacks pkg/push (a nested module is never in its parent's zip),
# so the pkg/push version that go.mod requires is downloaded too and copied
# in at ./pkg/push (its Go files are the tag's: checked for 3.7.6 against
# the repository). Then `go build ./cmd/loki`, version-stamped as Loki's
# Makefile does.
set -euo pipefail

LOKI_VERSION=${LOKI_VERSION:-3.7.8}
LOKI_VERSION=${LOKI_VERSION#v}
DEFAULT_DEST=${COSMICAC_LOKI_DIR:-${HOME:?HOME not set}/.cache/cosmicac/loki/loki-${LOKI_VERSION}}
if [[ "${1:-}" == --print-dest ]]; then
  echo "$DEFAULT_DEST"
  exit 0
fi
DEST=${1:-$DEFAULT_DEST}
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
WORK_DIR=${WORK_DIR:-$DEST/.build}
STAMP="loki=v${LOKI_VERSION}"

log() { printf '[build-loki %s] %s\n' "$(date +%T)" "$*" >&2; }

up_to_date() {
  [[ "${FORCE:-0}" != 1 && -x "$DEST/loki" && -f "$DEST/VERSION" && "$(cat "$DEST/VERSION")" == "$STAMP" ]]
}
if up_to_date; then
  log "up to date in $DEST ($STAMP); nothing to do"
  exit 0
fi

exec 9>"$DEST/.lock"
if ! flock -n 9; then
  log "another build holds $DEST/.lock; waiting"
  flock 9
fi
if up_to_date; then
  log "built meanwhile in $DEST ($STAMP); nothing to do"
  exit 0
fi

command -v go >/dev/null || { log "go not found in PATH"; exit 1; }
export CGO_ENABLED=0 GOWORK=off

modjson() { # module@version -> the field $2 of go mod download -json
  (cd "$WORK_DIR" && go mod download -json "$1") | awk -v f="\"$2\":" '$1==f {gsub(/[",]/, "", $2); print $2}'
}

mkdir -p "$WORK_DIR"
log "downloading github.com/grafana/loki/v3@v${LOKI_VERSION}"
loki_dir=$(modjson "github.com/grafana/loki/v3@v${LOKI_VERSION}" Dir)
[[ -d "$loki_dir" ]] || { log "could not download github.com/grafana/loki/v3@v${LOKI_VERSION}"; exit 1; }
push_ver=$(awk '$1=="github.com/grafana/loki/pkg/push" && $2 ~ /^v/ {print $2; exit}' "$loki_dir/go.mod")
[[ -n "$push_ver" ]] || { log "go.mod of loki v${LOKI_VERSION} requires no github.com/grafana/loki/pkg/push"; exit 1; }
log "downloading github.com/grafana/loki/pkg/push@${push_ver} (go.mod replaces it with ./pkg/push, absent from the module zip)"
push_dir=$(modjson "github.com/grafana/loki/pkg/push@${push_ver}" Dir)
[[ -d "$push_dir" ]] || { log "could not download github.com/grafana/loki/pkg/push@${push_ver}"; exit 1; }

src="$WORK_DIR/loki-v${LOKI_VERSION}"
rm -rf "$src"
cp -r "$loki_dir" "$src"
chmod -R u+w "$src"
mkdir -p "$src/pkg/push"
cp -r "$push_dir"/. "$src/pkg/push/"
chmod -R u+w "$src/pkg/push"

log "building loki v${LOKI_VERSION} (about 15 minutes on 2 cores)"
vpkg=github.com/grafana/loki/v3/pkg/util/build
ld="-s -w -X ${vpkg}.Version=${LOKI_VERSION} -X ${vpkg}.Branch=release-${LOKI_VERSION%.*}.x -X ${vpkg}.BuildDate=1970-01-01T00:00:00Z"
(cd "$src" && go build -trimpath -ldflags "$ld" -o "$DEST/loki.tmp" ./cmd/loki)
mv -f "$DEST/loki.tmp" "$DEST/loki"
rm -rf "$src"
echo "$STAMP" > "$DEST/VERSION"
log "installed into $DEST:"
"$DEST/loki" -version 2>&1 | head -1 >&2
ls -l "$DEST/loki" >&2
