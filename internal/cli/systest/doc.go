// Package systest is the whole system's tests through its command line:
// components and `cosmicac up` run as processes (this test binary re-run
// as cosmicac), crashes, takeovers, the README's walk and the docs'
// command lines against the whole command tree (the tests on real VMs are
// its subpackage vms'). They are slow (minutes) and live apart so that
// internal/cli's and internal/cli/components' tests stay quick and these
// run beside the rest.
package systest
