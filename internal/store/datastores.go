package store

import (
	"context"
	"time"
)

// Datastore is an object storage endpoint a team registered under an
// alias, with the credentials the platform signs its jobs' transfers with
// (docs/data.md). The secret key is kept sealed (internal/seal, with the
// team and alias as associated data) and never leaves the platform: jobs
// get short-lived presigned requests for their volumes' objects.
type Datastore struct {
	Team  string
	Alias string
	// Type is the protocol: "s3" (S3-compatible, SigV4).
	Type     string
	Endpoint string // scheme://host[:port], no path
	Region   string
	// AccessKey is the credentials' access key ID, shown to the team (a
	// name, not a secret, as AWS's consoles show it).
	AccessKey string
	// SealedSecret is the secret key, sealed.
	SealedSecret []byte
	CreatedBy    string
	CreatedAt    time.Time // returned in UTC
	UpdatedAt    time.Time // the credentials' last change (zero: never)
}

// Datastores keeps the teams' datastores (the app-node writes and reads
// them).
type Datastores interface {
	// CreateDatastore stores a datastore; an existing team and alias is
	// ErrConflict; an empty team, alias, type, endpoint or sealed secret,
	// or a team that does not exist, ErrInvalid.
	CreateDatastore(ctx context.Context, d Datastore) error
	// ListDatastores lists a team's datastores by alias ("" lists every
	// team's, by team then alias).
	ListDatastores(ctx context.Context, team string) ([]Datastore, error)
	// GetDatastore returns a team's datastore, or ErrNotFound.
	GetDatastore(ctx context.Context, team, alias string) (Datastore, error)
	// SetDatastoreCredentials replaces a datastore's access key and sealed
	// secret and sets its UpdatedAt, or returns ErrNotFound.
	SetDatastoreCredentials(ctx context.Context, team, alias, accessKey string, sealed []byte, at time.Time) (Datastore, error)
	// DeleteDatastore removes a team's datastore, or returns ErrNotFound.
	DeleteDatastore(ctx context.Context, team, alias string) error
}
