package apiv1

import "time"

// Datastore types (docs/data.md).
const (
	DatastoreS3 = "s3" // S3-compatible object storage, signed with SigV4
)

// DefaultDatastoreRegion is a datastore's region when none is given: the
// one SigV4 signs for when a server does not care (most S3-compatible
// servers but AWS).
const DefaultDatastoreRegion = "us-east-1"

// Datastore is a team's object storage endpoint as the API shows it: never
// its secret key, and of its access key only the last characters.
type Datastore struct {
	Alias    string `json:"alias"`
	Team     string `json:"team"`
	Type     string `json:"type"`
	Endpoint string `json:"endpoint"`
	Region   string `json:"region"`
	// AccessKeyHint is the end of the access key ID ("…WXYZ"), to tell
	// which credentials are set; absent for a key of 8 characters or
	// fewer.
	AccessKeyHint string    `json:"accessKeyHint,omitempty"`
	CreatedBy     string    `json:"createdBy"`
	CreatedAt     time.Time `json:"createdAt"`
	// UpdatedAt is the credentials' last change (absent: never).
	UpdatedAt time.Time `json:"updatedAt,omitzero"`
}

// DatastoreCredentials are a datastore's access key ID and secret key.
// They are written, never read: no answer carries the secret key.
type DatastoreCredentials struct {
	AccessKey string `json:"accessKey"`
	SecretKey string `json:"secretKey"`
}

// CreateDatastore is the body of POST /api/v1/datastores. Team defaults
// to the caller's; Type to s3; Region to DefaultDatastoreRegion.
type CreateDatastore struct {
	Alias       string               `json:"alias"`
	Team        string               `json:"team,omitempty"`
	Type        string               `json:"type,omitempty"`
	Endpoint    string               `json:"endpoint"`
	Region      string               `json:"region,omitempty"`
	Credentials DatastoreCredentials `json:"credentials"`
}

// DatastoreList is the answer of GET /api/v1/datastores.
type DatastoreList struct {
	Items []Datastore `json:"items"`
	Total int         `json:"total"`
}

// Bounds of a datastore's fields.
const (
	MaxDatastoreEndpoint  = 512
	MaxDatastoreAccessKey = 128
	MaxDatastoreSecretKey = 256
	MaxDatastoreRegion    = 64
)

// datastoreAlias is the {alias} of the datastore routes.
var datastoreAlias = Param{Name: "alias", In: InPath, Type: "", Required: true, Description: "The datastore's alias in the caller's team"}
