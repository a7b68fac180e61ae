-- 0006: limits of inference API keys (docs/inference.md, "API keys"), one
-- row per key that has any: the served model names it may use (a JSON
-- array), when it expires, and rotation (the hash of the secret the last
-- rotation replaced, valid until previous_expires_at). Times are Unix
-- nanoseconds, 0 for none.

CREATE TABLE IF NOT EXISTS api_key_limits (
	id                  text COLLATE "C" PRIMARY KEY REFERENCES api_keys (id) ON DELETE CASCADE,
	models              text NOT NULL DEFAULT '[]',
	expires_at          bigint NOT NULL DEFAULT 0,
	previous_hash       bytea UNIQUE,
	previous_expires_at bigint NOT NULL DEFAULT 0,
	rotated_at          bigint NOT NULL DEFAULT 0,
	last_used_at        bigint NOT NULL DEFAULT 0
);
