-- 0016: datastores, object storage endpoints of teams (docs/data.md). The
-- secret key is kept sealed (internal/seal); the platform signs requests
-- with it and never returns it.

CREATE TABLE IF NOT EXISTS datastores (
	team          text COLLATE "C" NOT NULL REFERENCES teams (name) ON DELETE CASCADE,
	alias         text COLLATE "C" NOT NULL,
	type          text COLLATE "C" NOT NULL,
	endpoint      text COLLATE "C" NOT NULL,
	region        text COLLATE "C" NOT NULL,
	access_key    text COLLATE "C" NOT NULL,
	sealed_secret bytea NOT NULL,
	created_by    text COLLATE "C" NOT NULL,
	created_at    bigint NOT NULL,
	updated_at    bigint NOT NULL DEFAULT 0,
	PRIMARY KEY (team, alias)
);
