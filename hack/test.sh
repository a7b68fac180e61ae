#!/usr/bin/env bash
# The whole test suite, as the README gives it: formatting, vet, and every
# test with the race detector. CI (.ci/run) installs the prerequisites first.
set -euo pipefail
cd "$(dirname "$0")/.."

unformatted=$(gofmt -l $(git ls-files '*.go'))
if [[ -n "$unformatted" ]]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
go vet ./...
go test -race -count=1 -timeout 20m ./... 2>&1 | tee /tmp/cosmicac-test.log
