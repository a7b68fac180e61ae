-- 0006: limits of inference API keys (docs/inference.md, "API keys"), one
-- row per key that has any: the served model names it may use (a JSON
-- array; empty: every model of its team), when it expires, and rotation:
-- the hash of the secret the last rotation replaced, which still works until
-- previous_expires_at. Times are Unix nanoseconds, 0 for none. last_used_at
-- is written at most once a minute per key. A table of its own (not ALTER
-- TABLE api_keys) so that the migration can be applied again, as every
-- migration here can.

CREATE TABLE IF NOT EXISTS api_key_limits (
	id                  TEXT PRIMARY KEY REFERENCES api_keys (id) ON DELETE CASCADE,
	models              TEXT NOT NULL DEFAULT '[]',
	expires_at          INTEGER NOT NULL DEFAULT 0,
	previous_hash       BLOB UNIQUE,
	previous_expires_at INTEGER NOT NULL DEFAULT 0,
	rotated_at          INTEGER NOT NULL DEFAULT 0,
	last_used_at        INTEGER NOT NULL DEFAULT 0
);
