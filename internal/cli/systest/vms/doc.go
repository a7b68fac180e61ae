// Package vms is the whole system's tests on real VMs: the QEMU rack
// end to end through the command line (`cosmicac up --rack qemu`, jobs,
// shells, ssh, restarts, a user's own disk image, the agent deadline), the
// worker conformance suite against the QEMU worker, and the relay's light
// start. Each boots hack/vm-image.sh's image (KVM where the host has it,
// TCG otherwise: about a minute and a half a boot); apart from
// internal/cli/systest so that the two slow packages run side by side.
package vms
