#!/usr/bin/env bash
# build-llama.sh — build llama.cpp's llama-server for CPU from the source
# that the npm package node-llama-cpp ships (no download from a website),
# and install it into DEST:
#
#   DEST/bin/llama-server   DEST/models/ggml-vocab-*.gguf   DEST/VERSION
#
# Usage:  hack/build-llama.sh [DEST_DIR]
#         hack/build-llama.sh --print-dest   # print the default DEST_DIR
#
# DEST_DIR defaults to $COSMICAC_LLAMA_DIR, else
# ~/.cache/cosmicac/llama/llama.cpp-<tag>-npm<NODE_LLAMA_CPP_VERSION>:
# outside the checkout, so every clone on a machine shares one build.
#
# Where the source comes from: `npm pack node-llama-cpp@VERSION` (the npm
# registry is reachable where GitHub is not) gives a tarball whose
# package/llama/gitRelease.bundle is a git bundle of llama.cpp at the
# release package/llama/llama.cpp.info.json names. The tarball's sha256 is
# pinned below: another tarball stops the build. Its models/ggml-vocab-*.gguf
# are real tokenizers without weights; the test models are made from them
# (internal/gguf/testmodel).
#
# The build: Debian's cmake and g++ (hack/install-deps.sh), configured with
# nothing to download (no curl, no OpenSSL) and no host-specific
# instructions (GGML_NATIVE=OFF: the binary runs on any x86-64 machine with
# AVX2 and FMA, QEMU's TCG `-cpu max` included), fully static and stripped
# (glibc, libstdc++ linked in; no OpenMP, ggml's own thread pool: a VM
# image needs no library of any version, which a check after the build
# holds), the target llama-server only. About 17 minutes on 2 cores.
#
# Environment (all optional):
#   NODE_LLAMA_CPP_VERSION  the npm package's version (default 3.21.1)
#   NODE_LLAMA_CPP_SHA256   its tarball's sha256 (default: the pinned one)
#   WORK_DIR                where the source is unpacked (default DEST_DIR/.build)
#   JOBS                    parallel compile jobs (default: the CPUs)
#   FORCE=1                 rebuild even if the binary is already present
#
# Idempotent: if DEST/VERSION records the requested build and the binary is
# executable, it exits 0 without touching anything. A lock (DEST/.lock)
# makes a second run wait for the first. No fixed time limit: on a loaded
# machine the build is merely slow.
set -euo pipefail

NODE_LLAMA_CPP_VERSION=${NODE_LLAMA_CPP_VERSION:-3.21.1}
PINNED_SHA256=7a231d6bafa14142a1cbed9893d4ec5bc6041b2a5f5939a623accaab4203c11f
NODE_LLAMA_CPP_SHA256=${NODE_LLAMA_CPP_SHA256:-$PINNED_SHA256}
# The llama.cpp release in that package (package/llama/llama.cpp.info.json),
# checked after unpacking.
LLAMA_TAG=v0.4.0
DEFAULT_DEST=${COSMICAC_LLAMA_DIR:-${HOME:?HOME not set}/.cache/cosmicac/llama/llama.cpp-${LLAMA_TAG}-npm${NODE_LLAMA_CPP_VERSION}}
if [[ "${1:-}" == --print-dest ]]; then
  echo "$DEFAULT_DEST"
  exit 0
fi
DEST=${1:-$DEFAULT_DEST}
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
WORK_DIR=${WORK_DIR:-$DEST/.build}
STAMP="llama.cpp=${LLAMA_TAG} node-llama-cpp=${NODE_LLAMA_CPP_VERSION} sha256=${NODE_LLAMA_CPP_SHA256} cpu fully-static no-openmp"

log() { printf '[build-llama %s] %s\n' "$(date +%T)" "$*" >&2; }

up_to_date() {
  [[ "${FORCE:-0}" != 1 && -x "$DEST/bin/llama-server" && -f "$DEST/VERSION" && "$(cat "$DEST/VERSION")" == "$STAMP" ]]
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

for tool in npm git cmake g++ sha256sum tar file; do
  command -v "$tool" >/dev/null || { log "$tool not found in PATH (hack/install-deps.sh installs it)"; exit 1; }
done

rm -rf "$WORK_DIR"
mkdir -p "$WORK_DIR"
trap 'rm -rf "$WORK_DIR"' EXIT
cd "$WORK_DIR"

log "fetching node-llama-cpp@${NODE_LLAMA_CPP_VERSION} from the npm registry"
tgz=$(npm pack --silent "node-llama-cpp@${NODE_LLAMA_CPP_VERSION}")
got=$(sha256sum "$tgz" | cut -d' ' -f1)
if [[ "$got" != "$NODE_LLAMA_CPP_SHA256" ]]; then
  log "node-llama-cpp-${NODE_LLAMA_CPP_VERSION}.tgz has sha256 $got, want $NODE_LLAMA_CPP_SHA256: not the pinned source"
  exit 1
fi
tar xzf "$tgz" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json
tag=$(sed -n 's/.*"tag": *"\([^"]*\)".*/\1/p' package/llama/llama.cpp.info.json)
if [[ "$tag" != "$LLAMA_TAG" ]]; then
  log "the package carries llama.cpp $tag, this script builds $LLAMA_TAG: update LLAMA_TAG with the pin"
  exit 1
fi
git -c advice.detachedHead=false clone --quiet package/llama/gitRelease.bundle src

log "configuring llama.cpp ${LLAMA_TAG} (CPU, static, nothing to download)"
cmake -S src -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF \
  -DGGML_OPENMP=OFF -DCMAKE_EXE_LINKER_FLAGS="-static -s" \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >build.log 2>&1 ||
  { cat build.log >&2; exit 1; }
log "building llama-server (about 14 minutes on 2 cores)"
t0=$SECONDS
cmake --build build --target llama-server -j "${JOBS:-$(nproc)}" >>build.log 2>&1 || { tail -50 build.log >&2; exit 1; }
log "built in $((SECONDS - t0))s"
# It runs in any VM image, whatever its libraries: nothing dynamic.
if ! file build/bin/llama-server | grep -q 'statically linked'; then
  log "build/bin/llama-server is not statically linked: $(file build/bin/llama-server)"
  exit 1
fi

mkdir -p "$DEST/bin" "$DEST/models"
install -m 0755 build/bin/llama-server "$DEST/bin/llama-server.tmp"
mv -f "$DEST/bin/llama-server.tmp" "$DEST/bin/llama-server"
cp src/models/ggml-vocab-*.gguf "$DEST/models/"
cp src/LICENSE "$DEST/LICENSE"
echo "$STAMP" >"$DEST/VERSION"
log "installed into $DEST:"
"$DEST/bin/llama-server" --version 2>&1 | tail -2 >&2
ls -l "$DEST/bin/llama-server" >&2
