# shellcheck shell=bash
# Sourced by hack/test.sh and hack/stress.sh: the build flags of the test
# run, so that a stress run's binaries are the suite's.
#
# The race detector on for every package but the SQLite engine itself
# (modernc.org/sqlite/lib: SQLite's C translated to Go, a library, not the
# project's code). Instrumented, every memory access of the translated C
# went through the race runtime, and its pointer checks (-d=checkptr,
# which -race implies) on top: the SQLite store's tests took 15 CPU-s with
# both, 7.5 without (docs/benchmarks.md "The test suite (CI)"). Only that
# package: it instantiates no generic code, which the linker shares between
# packages (uninstrumented, the whole driver and its libc took sync.Map's
# instrumented copy out of every package and the race detector reported
# hundreds of races that were not). The driver, its libc (no pointer
# checks), database/sql, the store and its callers stay instrumented, as
# do the locks SQLite takes (Go's sync). The last -gcflags a package
# matches wins.
buildflags=(-race -gcflags='modernc.org/...=-d=checkptr=0' -gcflags='modernc.org/sqlite/lib=-race=false -d=checkptr=0')

# The same as $GOFLAGS (each flag quoted, as cmd/go splits it), for a tool
# that builds through go list and takes no build flags of its own:
# staticcheck, whose `go list -export` then finds the packages vet and the
# tests compiled rather than compiling the tree a second time without the
# race detector.
buildflags_env=$(printf "'%s' " "${buildflags[@]}")
