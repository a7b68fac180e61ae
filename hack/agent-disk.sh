#!/usr/bin/env bash
# Builds the agent disk (internal/vmboot.AgentDisk): an ISO 9660 volume
# labelled COSMICAC holding the agent binary at its root as `cosmicac`: a
# static Linux build (CGO_ENABLED=0) of this checkout's cmd/cosmicac-agent,
# the agents alone (15 MB against the full binary's 87 MB). A VM whose rack
# attaches it (DeliveryDisk, the default) mounts it read-only at
# /run/cosmicac and runs /run/cosmicac/cosmicac agent instance|inference.
#
#   hack/agent-disk.sh [OUT.iso]      (default: dist/agent-disk-$GOARCH.iso)
#
# GOARCH picks the VMs' architecture (default amd64). Needs genisoimage
# (Debian: apt-get install genisoimage), or xorriso (-as mkisofs). On
# Kubernetes, package the ISO as a containerDisk:
# deploy/agent-disk.Containerfile.
set -euo pipefail
cd "$(dirname "$0")/.."

arch=${GOARCH:-amd64}
out=${1:-dist/agent-disk-$arch.iso}
label=COSMICAC # vmboot.AgentDiskLabel
file=cosmicac  # vmboot.AgentDiskFile

if command -v genisoimage >/dev/null; then
  mkiso=(genisoimage)
elif command -v mkisofs >/dev/null; then
  mkiso=(mkisofs)
elif command -v xorriso >/dev/null; then
  mkiso=(xorriso -as mkisofs)
else
  echo "agent-disk: needs genisoimage, mkisofs or xorriso (apt-get install genisoimage)" >&2
  exit 1
fi

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags "-s -w" -o "$dir/$file" ./cmd/cosmicac-agent
chmod 0755 "$dir/$file"
mkdir -p "$(dirname "$out")"
# The arguments of vmboot.DiskSpec.GenisoimageArgs: Rock Ridge keeps the
# name and the executable mode, Joliet for other readers.
"${mkiso[@]}" -quiet -output "$out" -volid "$label" -joliet -rock "$dir"
echo "agent disk $out: label $label, /$file ($version, linux/$arch)" >&2
