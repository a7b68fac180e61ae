// Package cosmic holds CosmicAC's domain: the nouns every component shares
// (Job, Spec, Status, Rack, Node, GPU, Reservation, User), the validation of a
// job spec, the job status state machine, reason codes and the sentinel
// errors that the API maps to HTTP statuses.
//
// It does no I/O and imports no network, database or Kubernetes package, so
// any package of the module may import it (and it imports none of them).
package cosmic
