-- 0016: datastores, object storage endpoints of teams (docs/data.md). The
-- secret key is kept sealed (internal/seal); the platform signs requests
-- with it and never returns it.

CREATE TABLE IF NOT EXISTS datastores (
	team          TEXT NOT NULL REFERENCES teams (name) ON DELETE CASCADE,
	alias         TEXT NOT NULL,
	type          TEXT NOT NULL,
	endpoint      TEXT NOT NULL,
	region        TEXT NOT NULL,
	access_key    TEXT NOT NULL,
	sealed_secret BLOB NOT NULL,
	created_by    TEXT NOT NULL,
	created_at    INTEGER NOT NULL,
	updated_at    INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (team, alias)
);
