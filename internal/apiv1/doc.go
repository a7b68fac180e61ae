// Package apiv1 holds the public JSON wire types of the HTTP API under
// /api/v1, the route table that both the app-node's router and the OpenAPI
// document are built from, and the reflection-based generator of that
// document. Jobs, specs and commands travel as the domain's own JSON
// (cosmic.Job, cosmic.Spec, cosmic.Command); this package adds the
// envelopes (lists, errors) and the types the domain lacks (racks, whoami).
//
// Importers: internal/appnode (serves it), internal/client (calls it), the
// CLI and the web interface. It imports only the domain.
package apiv1
