-- 0003: inference API keys of teams (proxy-inference). Only the sha256 of
-- each secret is kept.

CREATE TABLE IF NOT EXISTS api_keys (
	id         text COLLATE "C" PRIMARY KEY,
	name       text COLLATE "C" NOT NULL,
	team       text COLLATE "C" NOT NULL REFERENCES teams (name) ON DELETE CASCADE,
	created_by text COLLATE "C" NOT NULL,
	prefix     text COLLATE "C" NOT NULL,
	hash       bytea NOT NULL UNIQUE,
	created_at bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS api_keys_team ON api_keys (team, created_at, id);
