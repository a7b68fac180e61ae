package appnode

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/cosmicac/cosmicac/internal/apiv1"
	"github.com/cosmicac/cosmicac/internal/authz"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/seal"
	"github.com/cosmicac/cosmicac/internal/store"
)

// Datastores (docs/data.md): a team's object storage endpoints, by alias.
// The secret key is sealed with the app-node's secrets key before it is
// stored (sealedSecret) and never answered; nothing here contacts the
// endpoint (a tenant's endpoint is any address: the app-node does not
// reach into the operator's network on its behalf).

func (s *Server) datastoreStore() (store.Datastores, error) {
	if s.datastores == nil {
		return nil, errorf(http.StatusNotImplemented, apiv1.CodeNotImplemented, "this app-node keeps no datastores")
	}
	return s.datastores, nil
}

// datastoreAD is the associated data a datastore's secret is sealed with:
// its team and alias, so that a sealed secret moved onto another row does
// not open there.
func datastoreAD(team, alias string) []byte {
	return []byte("datastore\x00" + team + "\x00" + alias)
}

// sealSecret seals a datastore's secret key.
func sealSecret(k *seal.Key, team, alias, secret string) []byte {
	return k.Seal([]byte(secret), datastoreAD(team, alias))
}

// datastoreOut is a datastore as the API shows it.
func datastoreOut(d store.Datastore) apiv1.Datastore {
	out := apiv1.Datastore{Alias: d.Alias, Team: d.Team, Type: d.Type, Endpoint: d.Endpoint, Region: d.Region,
		CreatedBy: d.CreatedBy, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt}
	if len(d.AccessKey) > 8 {
		out.AccessKeyHint = "…" + d.AccessKey[len(d.AccessKey)-4:]
	}
	return out
}

// checkEndpoint checks a datastore's endpoint: http or https, a host, no
// credentials, path, query or fragment. It answers it without a trailing
// slash.
func checkEndpoint(raw string) (string, *cosmic.FieldError) {
	bad := func(msg string) (string, *cosmic.FieldError) {
		return "", &cosmic.FieldError{Field: "endpoint", Message: msg}
	}
	if raw == "" {
		return bad("is required: scheme://host[:port], such as https://s3.example.net")
	}
	if len(raw) > apiv1.MaxDatastoreEndpoint {
		return bad(fmt.Sprintf("at most %d bytes", apiv1.MaxDatastoreEndpoint))
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return bad("not a URL: want scheme://host[:port]")
	case u.Scheme != "http" && u.Scheme != "https":
		return bad(fmt.Sprintf("scheme %s: want http or https", clip(u.Scheme)))
	case u.Host == "" || u.Hostname() == "":
		return bad("has no host: want scheme://host[:port]")
	case u.User != nil:
		return bad("must not carry credentials: give them in credentials")
	case u.Path != "" && u.Path != "/", u.RawQuery != "" || u.ForceQuery, u.Fragment != "":
		return bad("must be scheme://host[:port] alone: buckets and prefixes are a volume's (container, prefix)")
	}
	return u.Scheme + "://" + u.Host, nil
}

// checkCredentials checks a datastore's credentials: both given, printable
// ASCII, bounded.
func checkCredentials(c apiv1.DatastoreCredentials) []*cosmic.FieldError {
	var errs []*cosmic.FieldError
	for _, f := range []struct {
		field, value string
		max          int
	}{{"credentials.accessKey", c.AccessKey, apiv1.MaxDatastoreAccessKey}, {"credentials.secretKey", c.SecretKey, apiv1.MaxDatastoreSecretKey}} {
		switch {
		case f.value == "":
			errs = append(errs, &cosmic.FieldError{Field: f.field, Message: "is required"})
		case len(f.value) > f.max:
			errs = append(errs, &cosmic.FieldError{Field: f.field, Message: fmt.Sprintf("at most %d characters", f.max)})
		case strings.IndexFunc(f.value, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0:
			errs = append(errs, &cosmic.FieldError{Field: f.field, Message: "printable ASCII without spaces"})
		}
	}
	return errs
}

// checkRegion checks a datastore's region: letters, digits and '-'.
func checkRegion(r string) *cosmic.FieldError {
	if len(r) > apiv1.MaxDatastoreRegion || strings.IndexFunc(r, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_')
	}) >= 0 {
		return &cosmic.FieldError{Field: "region", Message: fmt.Sprintf("letters, digits, '-' and '_', at most %d, such as us-east-1", apiv1.MaxDatastoreRegion)}
	}
	return nil
}

func (s *Server) createDatastore(w http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	ds, err := s.datastoreStore()
	if err != nil {
		return nil, err
	}
	var in apiv1.CreateDatastore
	if err := s.readJSON(w, r, &in); err != nil {
		return nil, err
	}
	var errs []*cosmic.FieldError
	if !cosmic.ValidAccountName(in.Alias) {
		errs = append(errs, &cosmic.FieldError{Field: "alias", Message: fmt.Sprintf("%s: lowercase letters, digits, '.', '_' and '-', starting with a letter or digit, at most %d", clip(in.Alias), cosmic.MaxAccountName)})
	}
	if in.Type == "" {
		in.Type = apiv1.DatastoreS3
	}
	if in.Type != apiv1.DatastoreS3 {
		errs = append(errs, &cosmic.FieldError{Field: "type", Message: fmt.Sprintf("%s: want s3 (S3-compatible object storage)", clip(in.Type))})
	}
	endpoint, fe := checkEndpoint(in.Endpoint)
	if fe != nil {
		errs = append(errs, fe)
	}
	if in.Region == "" {
		in.Region = apiv1.DefaultDatastoreRegion
	}
	if fe := checkRegion(in.Region); fe != nil {
		errs = append(errs, fe)
	}
	errs = append(errs, checkCredentials(in.Credentials)...)
	if len(errs) > 0 {
		return nil, invalid(errs...)
	}
	team := c.team
	if in.Team != "" && in.Team != team {
		if !c.inTeam(in.Team) {
			return nil, teamNotFound(in.Team)
		}
		if !c.can(in.Team, authz.DatastoresManage) {
			return nil, forbidden(c, authz.DatastoresManage, in.Team)
		}
		team = in.Team
	}
	c.auditTeam, c.auditTarget = team, in.Alias
	d := store.Datastore{Team: team, Alias: in.Alias, Type: in.Type, Endpoint: endpoint, Region: in.Region,
		AccessKey: in.Credentials.AccessKey, SealedSecret: sealSecret(s.secrets, team, in.Alias, in.Credentials.SecretKey),
		CreatedBy: c.user.Name, CreatedAt: s.now().UTC()}
	if err := ds.CreateDatastore(r.Context(), d); err != nil {
		if errors.Is(err, cosmic.ErrConflict) {
			return nil, errorf(http.StatusConflict, apiv1.CodeConflict, "team %s already has a datastore %s: delete it first, or replace its credentials (PUT …/datastores/%s/credentials)", team, in.Alias, in.Alias)
		}
		return nil, err
	}
	s.log.Info("datastore registered", "team", team, "alias", d.Alias, "endpoint", d.Endpoint, "user", c.user.Name)
	return datastoreOut(d), nil
}

func (s *Server) listDatastores(_ http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	ds, err := s.datastoreStore()
	if err != nil {
		return nil, err
	}
	l, err := ds.ListDatastores(r.Context(), c.team)
	if err != nil {
		return nil, err
	}
	out := apiv1.DatastoreList{Items: make([]apiv1.Datastore, 0, len(l)), Total: len(l)}
	for _, d := range l {
		out.Items = append(out.Items, datastoreOut(d))
	}
	return out, nil
}

// datastoreNotFound is the answer for an alias the caller's team does not
// have (another team's is the same).
func datastoreNotFound(c *caller, alias string) error {
	return errorf(http.StatusNotFound, apiv1.CodeNotFound, "team %s has no datastore %s (see `cosmicac datastores list`)", c.team, clip(alias))
}

func (s *Server) getDatastore(_ http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	ds, err := s.datastoreStore()
	if err != nil {
		return nil, err
	}
	alias := r.PathValue("alias")
	d, err := ds.GetDatastore(r.Context(), c.team, alias)
	if errors.Is(err, cosmic.ErrNotFound) {
		return nil, datastoreNotFound(c, alias)
	}
	if err != nil {
		return nil, err
	}
	return datastoreOut(d), nil
}

func (s *Server) setDatastoreCredentials(w http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	ds, err := s.datastoreStore()
	if err != nil {
		return nil, err
	}
	alias := r.PathValue("alias")
	c.auditTeam, c.auditTarget = c.team, alias
	var in apiv1.DatastoreCredentials
	if err := s.readJSON(w, r, &in); err != nil {
		return nil, err
	}
	// The JSON fields are the body's own; the checks name them so.
	var errs []*cosmic.FieldError
	for _, fe := range checkCredentials(in) {
		fe.Field = strings.TrimPrefix(fe.Field, "credentials.")
		errs = append(errs, fe)
	}
	if len(errs) > 0 {
		return nil, invalid(errs...)
	}
	d, err := ds.SetDatastoreCredentials(r.Context(), c.team, alias, in.AccessKey, sealSecret(s.secrets, c.team, alias, in.SecretKey), s.now().UTC())
	if errors.Is(err, cosmic.ErrNotFound) {
		return nil, datastoreNotFound(c, alias)
	}
	if err != nil {
		return nil, err
	}
	s.log.Info("datastore credentials replaced", "team", c.team, "alias", alias, "user", c.user.Name)
	return datastoreOut(d), nil
}

func (s *Server) deleteDatastore(_ http.ResponseWriter, r *http.Request, c *caller) (any, error) {
	ds, err := s.datastoreStore()
	if err != nil {
		return nil, err
	}
	alias := r.PathValue("alias")
	c.auditTeam, c.auditTarget = c.team, alias
	if err := ds.DeleteDatastore(r.Context(), c.team, alias); err != nil {
		if errors.Is(err, cosmic.ErrNotFound) {
			return nil, datastoreNotFound(c, alias)
		}
		return nil, err
	}
	s.log.Info("datastore removed", "team", c.team, "alias", alias, "user", c.user.Name)
	return nil, nil
}

// checkDatastores refuses a spec whose volumes (source or target) or
// model source name a datastore that is not one of team's, each by its
// field: another team's alias is as unknown as one that exists nowhere.
func (s *Server) checkDatastores(ctx context.Context, team string, spec cosmic.Spec) error {
	var errs []*cosmic.FieldError
	named := map[string]*cosmic.DataStoreSource{}
	for i, v := range spec.Volumes {
		named[fmt.Sprintf("volumes[%d].volumeSource.dataStore.alias", i)] = v.Source.DataStore
		named[fmt.Sprintf("volumes[%d].volumeTarget.targetDataStore.alias", i)] = targetOf(v)
	}
	if in := spec.Inference; in != nil {
		named["inference.modelSource.alias"] = in.ModelSource
	}
	for f, d := range named {
		if d == nil {
			continue
		}
		if s.datastores == nil {
			errs = append(errs, &cosmic.FieldError{Field: f, Message: "this app-node keeps no datastores"})
			continue
		}
		_, err := s.datastores.GetDatastore(ctx, team, d.Alias)
		switch {
		case errors.Is(err, cosmic.ErrNotFound):
			errs = append(errs, &cosmic.FieldError{Field: f, Message: fmt.Sprintf("team %s has no datastore %s (cosmicac datastores list; a team admin adds one)", team, d.Alias)})
		case err != nil:
			return err
		}
	}
	if len(errs) > 0 {
		slices.SortFunc(errs, func(a, b *cosmic.FieldError) int { return strings.Compare(a.Field, b.Field) })
		return invalid(errs...)
	}
	return nil
}

// targetOf is v's push target, or nil.
func targetOf(v cosmic.Volume) *cosmic.DataStoreSource {
	if v.Target == nil {
		return nil
	}
	return v.Target.TargetDataStore
}
