#!/usr/bin/env bash
# The web interface's build and browser tests (docs/webui.md).
#
#   hack/webui.sh --build   npm ci, then esbuild web/src into internal/webui/dist
#   hack/webui.sh --check   --build, then fail if dist differs from the
#                           committed files (the build is reproducible: the
#                           same sources and lock file give the same bytes),
#                           and type-check the sources that say @ts-check
#                           against types generated from the API's OpenAPI
#                           document (web/types/openapi.json, kept current
#                           by internal/apiv1's TestWebTypesSourceIsCurrent)
#   hack/webui.sh --test    build cosmicac and run the browser tests
#                           (web/tests) in Debian's Chromium against a real
#                           `cosmicac up`; screenshots and axe-core results
#                           go to $COSMICAC_TEST_OUT (default: a new
#                           directory of this run's own under $TMPDIR)
#
# It needs Node.js 20 or later with npm, and for --test Chromium
# ($CHROMIUM, default /usr/bin/chromium); .ci/run installs them.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[webui %s] %s\n' "$(date +%T)" "$*" >&2; }

build() {
  log "npm ci (web/package-lock.json)"
  (cd web && npm ci --no-audit --no-fund --loglevel=error)
  log "esbuild web/src -> internal/webui/dist"
  (cd web && node build.mjs)
}

# typecheck generates web/types/api.d.ts from the API's OpenAPI document
# (openapi-typescript) and runs tsc over web/src: the files that say
# // @ts-check are checked, strictly, against it.
typecheck() {
  log "types from web/types/openapi.json (openapi-typescript); tsc over the @ts-check sources"
  (cd web && npx --no-install openapi-typescript types/openapi.json -o types/api.d.ts >/dev/null && npx --no-install tsc -p .)
}

case "${1:-}" in
--build)
  build
  ;;
--check)
  build
  if ! git diff --quiet -- internal/webui/dist || [[ -n "$(git ls-files --others --exclude-standard internal/webui/dist)" ]]; then
    git status --short -- internal/webui/dist
    echo "internal/webui/dist differs from a build of web/: run hack/webui.sh --build and commit it" >&2
    exit 1
  fi
  log "internal/webui/dist is the build of web/src"
  typecheck
  ;;
--test)
  [[ -d web/node_modules ]] || (cd web && npm ci --no-audit --no-fund --loglevel=error)
  bindir=$(mktemp -d)
  trap 'rm -rf "$bindir"' EXIT
  bin=$bindir/cosmicac
  go build -o "$bin" ./cmd/cosmicac
  export COSMICAC_BIN=$bin CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
  export COSMICAC_TEST_OUT=${COSMICAC_TEST_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/cosmicac-ui.XXXXXX")}
  mkdir -p "$COSMICAC_TEST_OUT"
  log "browser tests: $CHROMIUM ($("$CHROMIUM" --version 2>/dev/null | tail -1)), screenshots in $COSMICAC_TEST_OUT/screenshots"
  (cd web && node --test --test-concurrency=1 --test-reporter=spec tests/)
  ;;
*)
  echo "usage: hack/webui.sh --build|--check|--test" >&2
  exit 2
  ;;
esac
