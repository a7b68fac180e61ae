// Package appnode is the app-node: the HTTP API under /api/v1 (docs/api.md),
// authentication by bearer token, teams and roles. It holds no job state:
// it forwards job and rack operations to the ork over the fabric (Ork) and
// keeps only accounts (Accounts). The routes, their access levels and
// statuses come from internal/apiv1's route table, which also generates the
// OpenAPI document, so the router and the document cannot drift.
//
// Importers: the CLI wiring (cosmicac app-node, cosmicac up) and tests.
package appnode
