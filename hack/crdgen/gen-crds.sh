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
# CDI stays at v1.65.0 while go.mod has containerized-data-importer-api
# v1.66.0: proxy.golang.org refuses the full kubevirt.io/containerized-data-importer
# module at v1.66.0 ("403 Forbidden: This module version is not available",
# checked 2026-12-01), and its operator package is where the CRD YAML lives.
# Between the API modules v1.65.0 and v1.66.0 the DataVolume schema gains two
# optional source fields only (spec.source.http.insecureSkipVerify,
# spec.source.vddk.certConfigMap), which CosmicAC never sets.
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
