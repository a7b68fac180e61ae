-- 0012: inference usage (store.Usage; docs/inference.md, "Metering"):
-- requests and tokens by the minute (minute: Unix seconds of its start),
-- the team that pays, its API key ('' for none), the job and its model.
-- usage_batches are the batches recorded, so that a delivery retried is
-- counted once; rows older than a day are pruned as batches come.

CREATE TABLE IF NOT EXISTS usage (
	minute            bigint NOT NULL,
	team              text COLLATE "C" NOT NULL,
	key_id            text COLLATE "C" NOT NULL,
	job_id            text COLLATE "C" NOT NULL,
	model             text COLLATE "C" NOT NULL,
	requests          bigint NOT NULL,
	prompt_tokens     bigint NOT NULL,
	completion_tokens bigint NOT NULL,
	PRIMARY KEY (minute, team, key_id, job_id, model)
);
CREATE INDEX IF NOT EXISTS usage_team_minute ON usage (team, minute);

CREATE TABLE IF NOT EXISTS usage_batches (
	id text COLLATE "C" PRIMARY KEY,
	at bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS usage_batches_at ON usage_batches (at);
