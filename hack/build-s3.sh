#!/usr/bin/env bash
# build-s3.sh — build the Versity S3 Gateway (Apache-2.0), the S3 server the
# data path's tests run on loopback, from the Go module proxy (no release
# downloads), and install it into DEST:
#
#   DEST/versitygw   DEST/VERSION
#
# Usage:  hack/build-s3.sh [DEST_DIR]
#         export COSMICAC_S3_SERVER=DEST_DIR/versitygw
#         hack/build-s3.sh --print-dest   # print the default DEST_DIR
#
# DEST_DIR defaults to $COSMICAC_S3_DIR, else
# ~/.cache/cosmicac/s3/versitygw-<VERSITYGW_VERSION>: outside the checkout,
# so every clone on a machine shares one build. internal/s3test starts it
# when COSMICAC_S3_SERVER names it; hack/test.sh sets that.
#
# Why Versity: it serves S3 (SigV4 required, so a wrong key is refused as
# by any real store) from a plain directory ("posix" backend: an object is
# DATADIR/BUCKET/KEY, which a test can read), starts in a fraction of a
# second and stops on SIGTERM. SeaweedFS, the other Apache-2.0 server that
# builds from Go modules here, takes 11 minutes to build and seconds to
# start (../shared/real-parts.md). MinIO's server is AGPL: not used.
#
# The first build takes about 2–3 minutes on 2 cores; the binary is ~45 MB.
# Later runs do nothing.
#
# Environment (all optional):
#   VERSITYGW_VERSION  the gateway's version (default 1.8.0)
#   FORCE=1            rebuild even if the binary is already present
#   GOFLAGS, GOMODCACHE, GOCACHE, GOPROXY are honoured as usual.
#
# Idempotent: if DEST/VERSION records the requested version and the binary
# is executable, it exits 0 without touching anything. A lock (DEST/.lock)
# makes a second run wait for the first. The module's checksum is checked
# against the Go checksum database, as for every module.
set -euo pipefail

VERSITYGW_VERSION=${VERSITYGW_VERSION:-1.8.0}
VERSITYGW_VERSION=${VERSITYGW_VERSION#v}
DEFAULT_DEST=${COSMICAC_S3_DIR:-${HOME:?HOME not set}/.cache/cosmicac/s3/versitygw-${VERSITYGW_VERSION}}
if [[ "${1:-}" == --print-dest ]]; then
  echo "$DEFAULT_DEST"
  exit 0
fi
DEST=${1:-$DEFAULT_DEST}
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
STAMP="versitygw=v${VERSITYGW_VERSION}"

log() { printf '[build-s3 %s] %s\n' "$(date +%T)" "$*" >&2; }

up_to_date() {
  [[ "${FORCE:-0}" != 1 && -x "$DEST/versitygw" && -f "$DEST/VERSION" && "$(cat "$DEST/VERSION")" == "$STAMP" ]]
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

log "building github.com/versity/versitygw/cmd/versitygw@v${VERSITYGW_VERSION} (about 2–3 minutes on 2 cores)"
bin=$(mktemp -d "$DEST/.bin.XXXXXX")
trap 'rm -rf "$bin"' EXIT
GOBIN="$bin" go install -trimpath -ldflags "-s -w" "github.com/versity/versitygw/cmd/versitygw@v${VERSITYGW_VERSION}"
mv -f "$bin/versitygw" "$DEST/versitygw"
echo "$STAMP" > "$DEST/VERSION"
log "installed into $DEST:"
"$DEST/versitygw" --version 2>&1 | head -3 >&2 || true
ls -l "$DEST/versitygw" >&2
