package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/cosmicac/cosmicac/internal/apiv1"
)

// The app-node serves the datastore routes (apiv1.OpCreateDatastore, …;
// docs/data.md):
//
//	POST   /api/v1/datastores                        apiv1.CreateDatastore → 201 apiv1.Datastore
//	GET    /api/v1/datastores                        → 200 apiv1.DatastoreList
//	GET    /api/v1/datastores/{alias}                → 200 apiv1.Datastore
//	PUT    /api/v1/datastores/{alias}/credentials    apiv1.DatastoreCredentials → 200 apiv1.Datastore
//	DELETE /api/v1/datastores/{alias}                → 204

// CreateDatastore registers a datastore of the caller's team (or in.Team).
func (c *Client) CreateDatastore(ctx context.Context, in apiv1.CreateDatastore) (apiv1.Datastore, error) {
	var out apiv1.Datastore
	err := c.do(ctx, http.MethodPost, "/datastores", nil, in, &out)
	return out, err
}

// ListDatastores lists the caller's team's datastores.
func (c *Client) ListDatastores(ctx context.Context) ([]apiv1.Datastore, error) {
	var out apiv1.DatastoreList
	err := c.do(ctx, http.MethodGet, "/datastores", nil, nil, &out)
	return out.Items, err
}

// GetDatastore reads one of the caller's team's datastores.
func (c *Client) GetDatastore(ctx context.Context, alias string) (apiv1.Datastore, error) {
	var out apiv1.Datastore
	err := c.do(ctx, http.MethodGet, "/datastores/"+url.PathEscape(alias), nil, nil, &out)
	return out, err
}

// SetDatastoreCredentials replaces a datastore's credentials.
func (c *Client) SetDatastoreCredentials(ctx context.Context, alias string, in apiv1.DatastoreCredentials) (apiv1.Datastore, error) {
	var out apiv1.Datastore
	err := c.do(ctx, http.MethodPut, "/datastores/"+url.PathEscape(alias)+"/credentials", nil, in, &out)
	return out, err
}

// DeleteDatastore removes a datastore of the caller's team.
func (c *Client) DeleteDatastore(ctx context.Context, alias string) error {
	return c.do(ctx, http.MethodDelete, "/datastores/"+url.PathEscape(alias), nil, nil, nil)
}

// DataSync pulls or pushes a running job's datastore volumes now (POST
// /api/v1/jobs/{id}/datasync): volume "" for every one, replica the
// replica whose agent does it.
func (c *Client) DataSync(ctx context.Context, id string, in apiv1.DataSync, replica int) (apiv1.DataSyncResult, error) {
	var out apiv1.DataSyncResult
	q := url.Values{}
	if replica > 0 {
		q.Set(apiv1.QueryReplica, strconv.Itoa(replica))
	}
	err := c.do(ctx, http.MethodPost, jobPath(id, "datasync"), q, in, &out)
	return out, err
}

// StartDataSync is DataSync answered once the sync has begun (state
// running, each volume queued); GetDataSync follows it.
func (c *Client) StartDataSync(ctx context.Context, id string, in apiv1.DataSync, replica int) (apiv1.DataSyncResult, error) {
	var out apiv1.DataSyncResult
	q := url.Values{apiv1.QueryWait: {"false"}}
	if replica > 0 {
		q.Set(apiv1.QueryReplica, strconv.Itoa(replica))
	}
	err := c.do(ctx, http.MethodPost, jobPath(id, "datasync"), q, in, &out)
	return out, err
}

// GetDataSync is the replica's last datasync as it is now (GET
// /api/v1/jobs/{id}/datasync).
func (c *Client) GetDataSync(ctx context.Context, id string, replica int) (apiv1.DataSyncResult, error) {
	var out apiv1.DataSyncResult
	q := url.Values{}
	if replica > 0 {
		q.Set(apiv1.QueryReplica, strconv.Itoa(replica))
	}
	err := c.do(ctx, http.MethodGet, jobPath(id, "datasync"), q, nil, &out)
	return out, err
}
