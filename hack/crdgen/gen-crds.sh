#!/usr/bin/env bash
# gen-crds.sh — write the real KubeVirt (VirtualMachineInstance,
# VirtualMachine), CDI (DataVolume) and Multus (NetworkAttachmentDefinition)
# CRDs for envtest, using only the Go module proxy (no release YAML).
# Run it when bumping versions and commit the output (the CDI module zip is
# ~250 MB because it carries test images, so CI never runs this).
#
# Usage: hack/crdgen/gen-crds.sh [OUT_DIR]   (default internal/k8stest/testdata/crds)
#   KUBEVIRT_VERSION (v1.9.0)  CDI_VERSION (v1.65.0)  NAD_VERSION (v1.7.7)
#
# crdgen (main.go next to this script) is its own Go module (local/crdgen), so
# it is not part of the cosmicac build; see docs/testing-kubernetes.md.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-$HERE/../../internal/k8stest/testdata/crds}
KUBEVIRT_VERSION=${KUBEVIRT_VERSION:-v1.9.0}
CDI_VERSION=${CDI_VERSION:-v1.65.0}
NAD_VERSION=${NAD_VERSION:-v1.7.7}
export GOWORK=off GOFLAGS=-mod=mod

moddir() { # download a module version and print its directory in GOMODCACHE
  (cd "$HERE" && go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
}
KV=$(moddir "kubevirt.io/kubevirt@${KUBEVIRT_VERSION}")
CDI=$(moddir "kubevirt.io/containerized-data-importer@${CDI_VERSION}")
NAD=$(moddir "github.com/k8snetworkplumbingwg/network-attachment-definition-client@${NAD_VERSION}")
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
(cd "$HERE" && go run . -kubevirt "$KV" -cdi "$CDI" -nad "$NAD" -out "$OUT")
