-- 0001: jobs, GPU reservations, racks, accounts (PostgreSQL dialect of
-- internal/store/sqlite/migrations/0001_init.sql: the same tables, columns
-- and index names; TestSchemasMatch compares them).
-- Times are bigint nanoseconds since the Unix epoch (UTC), as in SQLite:
-- timestamptz keeps only microseconds. Text columns collate "C" (bytes),
-- so that sorting is SQLite's whatever the database's locale.

CREATE TABLE jobs (
	id         text COLLATE "C" PRIMARY KEY,
	team       text COLLATE "C" NOT NULL,
	user_name  text COLLATE "C" NOT NULL,
	name       text COLLATE "C" NOT NULL,
	state      text COLLATE "C" NOT NULL,
	created_at bigint NOT NULL,
	updated_at bigint NOT NULL,
	spec       jsonb NOT NULL, -- cosmic.Spec
	status     jsonb NOT NULL  -- cosmic.Status
);
CREATE INDEX jobs_created   ON jobs (created_at, id);
CREATE INDEX jobs_updated   ON jobs (updated_at, id);
CREATE INDEX jobs_name      ON jobs (name, id);
CREATE INDEX jobs_state     ON jobs (state, created_at, id);
CREATE INDEX jobs_team      ON jobs (team, state, created_at, id);
CREATE INDEX jobs_team_upd  ON jobs (team, updated_at, id);
CREATE INDEX jobs_user      ON jobs (user_name, created_at, id);
CREATE INDEX jobs_cover     ON jobs (id, team, user_name, state, created_at, updated_at, name);

CREATE TABLE job_labels (
	job_id text COLLATE "C" NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
	key    text COLLATE "C" NOT NULL,
	value  text COLLATE "C" NOT NULL,
	PRIMARY KEY (job_id, key)
);
CREATE INDEX job_labels_kv ON job_labels (key, value, job_id);

CREATE TABLE racks (
	id           text COLLATE "C" PRIMARY KEY,
	rack         jsonb NOT NULL, -- cosmic.Rack
	worker_addrs jsonb NOT NULL, -- []string
	nodes        jsonb NOT NULL  -- []cosmic.Node
);

CREATE TABLE reservations (
	job_id  text COLLATE "C" NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
	replica integer NOT NULL,
	rack    text COLLATE "C" NOT NULL REFERENCES racks (id),
	PRIMARY KEY (job_id, replica)
);
CREATE INDEX reservations_rack ON reservations (rack);

-- The UNIQUE constraint is the guarantee that no GPU is ever claimed twice,
-- whatever the isolation level of the writers.
CREATE TABLE reservation_gpus (
	job_id    text COLLATE "C" NOT NULL,
	replica   integer NOT NULL,
	rack      text COLLATE "C" NOT NULL,
	node      text COLLATE "C" NOT NULL,
	node_pos  integer NOT NULL,
	gpu_index integer NOT NULL CHECK (gpu_index >= 0),
	UNIQUE (rack, node, gpu_index),
	FOREIGN KEY (job_id, replica) REFERENCES reservations (job_id, replica) ON DELETE CASCADE
);
CREATE INDEX reservation_gpus_job ON reservation_gpus (job_id, replica, node_pos, gpu_index);

CREATE TABLE teams (
	name text COLLATE "C" PRIMARY KEY
);

CREATE TABLE users (
	name text COLLATE "C" PRIMARY KEY,
	team text COLLATE "C" NOT NULL REFERENCES teams (name),
	role text COLLATE "C" NOT NULL
);
CREATE INDEX users_team ON users (team);

CREATE TABLE tokens (
	id         text COLLATE "C" PRIMARY KEY,
	name       text COLLATE "C" NOT NULL,
	user_name  text COLLATE "C" NOT NULL REFERENCES users (name) ON DELETE CASCADE,
	hash       bytea NOT NULL UNIQUE,
	created_at bigint NOT NULL,
	expires_at bigint NOT NULL -- 0 = never
);
CREATE INDEX tokens_user ON tokens (user_name);
