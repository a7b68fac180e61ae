-- 0012: inference usage (store.Usage; docs/inference.md, "Metering"):
-- requests and tokens by the minute (minute: Unix seconds of its start),
-- the team that pays, its API key ('' for none), the job and its model.
-- usage_batches are the batches recorded, so that a delivery retried is
-- counted once; rows older than a day are pruned as batches come.

CREATE TABLE IF NOT EXISTS usage (
	minute            INTEGER NOT NULL,
	team              TEXT NOT NULL,
	key_id            TEXT NOT NULL,
	job_id            TEXT NOT NULL,
	model             TEXT NOT NULL,
	requests          INTEGER NOT NULL,
	prompt_tokens     INTEGER NOT NULL,
	completion_tokens INTEGER NOT NULL,
	PRIMARY KEY (minute, team, key_id, job_id, model)
);
CREATE INDEX IF NOT EXISTS usage_team_minute ON usage (team, minute);

CREATE TABLE IF NOT EXISTS usage_batches (
	id TEXT PRIMARY KEY,
	at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS usage_batches_at ON usage_batches (at);
