package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// CreateDatastore implements store.Datastores.
func (s *Store) CreateDatastore(ctx context.Context, d store.Datastore) error {
	if d.Team == "" || d.Alias == "" || d.Type == "" || d.Endpoint == "" || len(d.SealedSecret) == 0 {
		return fmt.Errorf("create datastore %q: needs a team, an alias, a type, an endpoint and a sealed secret: %w", d.Alias, cosmic.ErrInvalid)
	}
	return s.c.Write(ctx, func(tx *Tx) error {
		_, err := tx.q.Exec(ctx, `INSERT INTO datastores (team, alias, type, endpoint, region, access_key, sealed_secret, created_by, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			d.Team, d.Alias, d.Type, d.Endpoint, d.Region, d.AccessKey, d.SealedSecret, d.CreatedBy, Nanos(d.CreatedAt), Nanos(d.UpdatedAt))
		switch {
		case s.d.IsUnique(err):
			return fmt.Errorf("create datastore %s of team %s: it already exists: %w", d.Alias, d.Team, cosmic.ErrConflict)
		case s.d.IsForeignKey(err):
			return fmt.Errorf("create datastore %s: team %q does not exist: %w", d.Alias, d.Team, cosmic.ErrInvalid)
		case err != nil:
			return fmt.Errorf("create datastore %s: %w", d.Alias, s.d.wrap(err))
		}
		return nil
	})
}

const selectDatastores = `SELECT team, alias, type, endpoint, region, access_key, sealed_secret, created_by, created_at, updated_at FROM datastores `

func scanDatastore(sc Row) (store.Datastore, error) {
	var d store.Datastore
	var created, updated int64
	if err := sc.Scan(&d.Team, &d.Alias, &d.Type, &d.Endpoint, &d.Region, &d.AccessKey, &d.SealedSecret, &d.CreatedBy, &created, &updated); err != nil {
		return store.Datastore{}, err
	}
	d.CreatedAt, d.UpdatedAt = FromNanos(created), FromNanos(updated)
	return d, nil
}

// ListDatastores implements store.Datastores.
func (s *Store) ListDatastores(ctx context.Context, team string) ([]store.Datastore, error) {
	q, args := selectDatastores+"ORDER BY team, alias", []any(nil)
	if team != "" {
		q, args = selectDatastores+"WHERE team = $1 ORDER BY alias", []any{team}
	}
	return query(ctx, s.read.q, s.d, "list datastores", q, args, func(rows Rows) (store.Datastore, error) { return scanDatastore(rows) })
}

// GetDatastore implements store.Datastores.
func (s *Store) GetDatastore(ctx context.Context, team, alias string) (store.Datastore, error) {
	return s.read.getDatastore(ctx, team, alias)
}

func (t *Tx) getDatastore(ctx context.Context, team, alias string) (store.Datastore, error) {
	d, err := scanDatastore(t.q.QueryRow(ctx, selectDatastores+"WHERE team = $1 AND alias = $2", team, alias))
	if errors.Is(err, sql.ErrNoRows) || t.d.unstorable(err) {
		return store.Datastore{}, fmt.Errorf("datastore %s of team %s: %w", alias, team, cosmic.ErrNotFound)
	}
	if err != nil {
		return store.Datastore{}, fmt.Errorf("get datastore %s of team %s: %w", alias, team, err)
	}
	return d, nil
}

// SetDatastoreCredentials implements store.Datastores.
func (s *Store) SetDatastoreCredentials(ctx context.Context, team, alias, accessKey string, sealed []byte, at time.Time) (store.Datastore, error) {
	if len(sealed) == 0 {
		return store.Datastore{}, fmt.Errorf("set the credentials of datastore %s: needs a sealed secret: %w", alias, cosmic.ErrInvalid)
	}
	var out store.Datastore
	err := s.c.Write(ctx, func(tx *Tx) error {
		res, err := tx.q.Exec(ctx, "UPDATE datastores SET access_key = $1, sealed_secret = $2, updated_at = $3 WHERE team = $4 AND alias = $5",
			accessKey, sealed, Nanos(at), team, alias)
		if err != nil && !s.d.unstorable(err) {
			return fmt.Errorf("set the credentials of datastore %s: %w", alias, s.d.wrap(err))
		}
		if err == nil {
			if n, rerr := res.RowsAffected(); rerr != nil || n == 0 {
				err = errors.Join(cosmic.ErrNotFound, rerr)
			}
		}
		if err != nil {
			return fmt.Errorf("datastore %s of team %s: %w", alias, team, cosmic.ErrNotFound)
		}
		out, err = tx.getDatastore(ctx, team, alias)
		return err
	})
	return out, err
}

// DeleteDatastore implements store.Datastores.
func (s *Store) DeleteDatastore(ctx context.Context, team, alias string) error {
	return s.c.Write(ctx, func(tx *Tx) error {
		res, err := tx.q.Exec(ctx, "DELETE FROM datastores WHERE team = $1 AND alias = $2", team, alias)
		if err != nil && !s.d.unstorable(err) {
			return fmt.Errorf("delete datastore %s: %w", alias, err)
		}
		missing := fmt.Errorf("datastore %s of team %s: %w", alias, team, cosmic.ErrNotFound)
		if err != nil {
			return missing
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(missing, err)
		}
		return nil
	})
}
