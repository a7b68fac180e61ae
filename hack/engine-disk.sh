#!/usr/bin/env bash
# Builds an engine disk (internal/vmboot.EngineDisk) for racks whose VMs
# run llama.cpp: an ISO 9660 volume labelled CACENGINE holding
# llama-server at its root (a static linux/amd64 build: hack/build-llama.sh)
# and the GGUF models under models/, each as ORG/NAME.gguf, the name a job
# gives as inference.model. A VM of a llama.cpp replica mounts it read-only
# at /run/cosmicac-engine. The QEMU rack builds one per model itself; on
# Kubernetes, package it as a containerDisk
# (deploy/engine-disk.Containerfile) and name it in the rack config
# (images.engineDisk, with images.llamaCPP).
#
#   hack/engine-disk.sh MODEL_DIR [OUT.iso]   (default: dist/engine-disk-amd64.iso)
#
# MODEL_DIR holds the models (ORG/NAME.gguf); `cosmicac up` installs the
# test models into DATA_DIR/models. LLAMA_SERVER names the engine (default:
# hack/build-llama.sh's build). Needs genisoimage, mkisofs or xorriso.
set -euo pipefail
cd "$(dirname "$0")/.."

models=${1:?usage: hack/engine-disk.sh MODEL_DIR [OUT.iso]}
out=${2:-dist/engine-disk-amd64.iso}
server=${LLAMA_SERVER:-$(hack/build-llama.sh --print-dest)/bin/llama-server}
label=CACENGINE # vmboot.EngineDiskLabel

[[ -x "$server" ]] || { echo "engine-disk: no llama-server at $server (hack/build-llama.sh builds one)" >&2; exit 1; }
file "$server" | grep -q 'statically linked' || { echo "engine-disk: $server is not statically linked: a VM image may lack its libraries" >&2; exit 1; }
if command -v genisoimage >/dev/null; then
  mkiso=(genisoimage)
elif command -v mkisofs >/dev/null; then
  mkiso=(mkisofs)
elif command -v xorriso >/dev/null; then
  mkiso=(xorriso -as mkisofs)
else
  echo "engine-disk: needs genisoimage, mkisofs or xorriso (apt-get install genisoimage)" >&2
  exit 1
fi

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
install -m 0755 "$server" "$dir/llama-server"
mkdir -p "$dir/models"
cp -R "$models"/. "$dir/models/"
find "$dir/models" ! -type d ! -name '*.gguf' -delete
n=$(find "$dir/models" -name '*.gguf' | wc -l)
((n > 0)) || { echo "engine-disk: no *.gguf in $models" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
"${mkiso[@]}" -quiet -output "$out" -volid "$label" -joliet -joliet-long -rock "$dir"
echo "engine disk $out: label $label, /llama-server, $n models under /models" >&2
