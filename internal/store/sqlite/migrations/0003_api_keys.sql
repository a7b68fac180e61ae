-- 0003: inference API keys of teams (proxy-inference). Only the sha256 of
-- each secret is kept.

CREATE TABLE IF NOT EXISTS api_keys (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL,
	team       TEXT NOT NULL REFERENCES teams (name) ON DELETE CASCADE,
	created_by TEXT NOT NULL,
	prefix     TEXT NOT NULL,
	hash       BLOB NOT NULL UNIQUE,
	created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS api_keys_team ON api_keys (team, created_at, id);
