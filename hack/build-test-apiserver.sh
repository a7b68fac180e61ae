#!/usr/bin/env bash
# build-test-apiserver.sh — build kube-apiserver and etcd from Go modules (no
# release downloads) and install them into DEST, in the layout that
# controller-runtime's envtest expects for KUBEBUILDER_ASSETS:
#
#   DEST/kube-apiserver   DEST/etcd   DEST/VERSIONS
#
# Usage:  hack/build-test-apiserver.sh [DEST_DIR]
#         export KUBEBUILDER_ASSETS=DEST_DIR
#         hack/build-test-apiserver.sh --print-dest   # print the default DEST_DIR
#
# DEST_DIR defaults to $COSMICAC_ENVTEST_DIR, else
# ~/.cache/cosmicac/envtest/k8s-<K8S_VERSION>-etcd-<ETCD_VERSION>: outside the
# checkout, so every clone on a machine shares one build. internal/k8stest
# looks there too (KUBEBUILDER_ASSETS wins). See docs/testing-kubernetes.md.
#
# The first build takes 5-10 minutes on 2 cores, ~2.4 GB RAM and ~3.8 GB of
# Go module/build caches; later runs do nothing.
#
# Environment (all optional):
#   K8S_VERSION   Kubernetes version to build kube-apiserver from   (default 1.37.2)
#   ETCD_VERSION  etcd server version (default: the newest patch of the etcd minor
#                 that k8s.io/kubernetes pins in hack/lib/etcd.sh: 1.37 -> 3.7.x,
#                 1.35/1.36 -> 3.6.x)
#   WORK_DIR      scratch Go modules are created here               (default DEST_DIR/.build)
#   FORCE=1       rebuild even if the binaries are already present
#   GOFLAGS, GOMODCACHE, GOCACHE, GOPROXY are honoured as usual.
#
# Idempotent: if DEST/VERSIONS already records the requested versions and both
# binaries are executable, it exits 0 without touching anything.
#
# How it works:
#  * kube-apiserver: k8s.io/kubernetes cannot be `go install`ed directly because
#    its go.mod requires every k8s.io/* staging module at v0.0.0 and replaces
#    them with ./staging/... (replace directives of dependencies are ignored).
#    We create a scratch module that requires k8s.io/kubernetes vX.Y.Z and maps
#    each of those staging modules to its published v0.Y.Z tag.
#  * etcd: a three-line main package calling go.etcd.io/etcd/server/v3/etcdmain.Main.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-1.37.2}
K8S_VERSION=${K8S_VERSION#v}
if [[ -z "${ETCD_VERSION:-}" ]]; then
  case "$K8S_VERSION" in
    1.37.*|1.38.*) ETCD_VERSION=3.7.3 ;;   # upstream 1.37 tests with etcd 3.7.0
    *)             ETCD_VERSION=3.6.16 ;;  # upstream 1.35/1.36 test with etcd 3.6.x
  esac
fi
ETCD_VERSION=${ETCD_VERSION#v}
DEFAULT_DEST=${COSMICAC_ENVTEST_DIR:-${HOME:?HOME not set}/.cache/cosmicac/envtest/k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}}
if [[ "${1:-}" == --print-dest ]]; then
  echo "$DEFAULT_DEST"
  exit 0
fi
DEST=${1:-$DEFAULT_DEST}
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
WORK_DIR=${WORK_DIR:-$DEST/.build}
STAMP="kube-apiserver=v${K8S_VERSION} etcd=v${ETCD_VERSION}"

log() { printf '[build-test-apiserver %s] %s\n' "$(date +%T)" "$*" >&2; }

if [[ "${FORCE:-0}" != 1 && -x "$DEST/kube-apiserver" && -x "$DEST/etcd" \
      && -f "$DEST/VERSIONS" && "$(cat "$DEST/VERSIONS")" == "$STAMP" ]]; then
  log "up to date in $DEST ($STAMP); nothing to do"
  exit 0
fi

command -v go >/dev/null || { log "go not found in PATH"; exit 1; }

# Static, stripped binaries; never pick up a surrounding go.work.
export CGO_ENABLED=0 GOWORK=off
LDFLAGS="-s -w"

# ---------------------------------------------------------------- kube-apiserver
build_kube_apiserver() {
  local minor=${K8S_VERSION#*.}            # 37.2
  local staging_ver="v0.${minor}"          # v0.37.2
  local mod_dir="$WORK_DIR/kube-apiserver-v${K8S_VERSION}"
  if [[ "${FORCE:-0}" != 1 && -x "$DEST/kube-apiserver" ]] \
     && "$DEST/kube-apiserver" --version 2>/dev/null | grep -qx "Kubernetes v${K8S_VERSION}"; then
    log "kube-apiserver v${K8S_VERSION} already present"
    return
  fi
  mkdir -p "$mod_dir"
  log "resolving k8s.io/kubernetes@v${K8S_VERSION} (go.mod only)"
  local gomod
  gomod=$(cd "$mod_dir" && GOFLAGS=-mod=mod go list -m -f '{{.GoMod}}' "k8s.io/kubernetes@v${K8S_VERSION}")
  [[ -f "$gomod" ]] || { log "could not fetch go.mod of k8s.io/kubernetes@v${K8S_VERSION}"; exit 1; }

  local gover godebug staging
  gover=$(awk '$1=="go"{print $2; exit}' "$gomod")
  godebug=$(grep -E '^godebug ' "$gomod" || true)
  # Staging modules: required at v0.0.0 *and* replaced with ./staging/src/...
  staging=$(awk '$2=="=>" && $3 ~ /^\.\/staging\// {print $1}' "$gomod" | sort -u)
  {
    echo "module local/envtest-assets/kube-apiserver"
    echo
    echo "go ${gover}"
    [[ -n "$godebug" ]] && { echo; echo "$godebug"; }
    echo
    echo "require k8s.io/kubernetes v${K8S_VERSION}"
    echo
    echo "replace ("
    for m in $staging; do
      # only modules k8s.io/kubernetes actually requires (sample-* are not published)
      if grep -qE "^[[:space:]]+${m//./\\.} v0\.0\.0\$" "$gomod"; then
        echo "	$m => $m ${staging_ver}"
      fi
    done
    echo ")"
  } > "$mod_dir/go.mod"
  rm -f "$mod_dir/go.sum"

  log "downloading modules for k8s.io/kubernetes/cmd/kube-apiserver"
  (cd "$mod_dir" && go get "k8s.io/kubernetes/cmd/kube-apiserver@v${K8S_VERSION}")

  log "building kube-apiserver v${K8S_VERSION}"
  # Version stamping the way hack/lib/version.sh does it, so that
  # `kube-apiserver --version` and /version report the real version.
  local vpkg="k8s.io/component-base/version"
  local ld="$LDFLAGS -X ${vpkg}.gitVersion=v${K8S_VERSION} -X ${vpkg}.gitMajor=${K8S_VERSION%%.*}"
  ld+=" -X ${vpkg}.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2) -X ${vpkg}.gitTreeState=clean"
  ld+=" -X ${vpkg}.buildDate=1970-01-01T00:00:00Z"
  ld+=" -X k8s.io/client-go/pkg/version.gitVersion=v${K8S_VERSION}"
  (cd "$mod_dir" && go build -trimpath -ldflags "$ld" -o "$DEST/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver)
  mv -f "$DEST/kube-apiserver.tmp" "$DEST/kube-apiserver"
}

# ---------------------------------------------------------------------- etcd
build_etcd() {
  local mod_dir="$WORK_DIR/etcd-v${ETCD_VERSION}"
  if [[ "${FORCE:-0}" != 1 && -x "$DEST/etcd" ]] \
     && "$DEST/etcd" --version 2>/dev/null | grep -q "^etcd Version: ${ETCD_VERSION}\$"; then
    log "etcd v${ETCD_VERSION} already present"
    return
  fi
  mkdir -p "$mod_dir"
  cat > "$mod_dir/main.go" <<'EOF'
// Command etcd is the upstream etcd server (go.etcd.io/etcd/server/v3/etcdmain).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
  cat > "$mod_dir/go.mod" <<EOF
module local/envtest-assets/etcd

go 1.25.0
EOF
  rm -f "$mod_dir/go.sum"
  log "downloading go.etcd.io/etcd/server/v3@v${ETCD_VERSION}"
  (cd "$mod_dir" && go get "go.etcd.io/etcd/server/v3@v${ETCD_VERSION}" && go mod tidy)
  log "building etcd v${ETCD_VERSION}"
  (cd "$mod_dir" && go build -trimpath -ldflags "$LDFLAGS" -o "$DEST/etcd.tmp" .)
  mv -f "$DEST/etcd.tmp" "$DEST/etcd"
}

build_kube_apiserver
build_etcd
echo "$STAMP" > "$DEST/VERSIONS"
log "installed into $DEST:"
"$DEST/kube-apiserver" --version >&2
"$DEST/etcd" --version 2>&1 | sed -n 1p >&2 # sed reads it all: no SIGPIPE under pipefail
ls -l "$DEST/kube-apiserver" "$DEST/etcd" >&2
