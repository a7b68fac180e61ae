-- 0001: jobs, GPU reservations, racks, accounts.
-- Times are INTEGER nanoseconds since the Unix epoch (UTC).

CREATE TABLE jobs (
	id         TEXT PRIMARY KEY,
	team       TEXT NOT NULL,
	user_name  TEXT NOT NULL,
	name       TEXT NOT NULL,
	state      TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	spec       TEXT NOT NULL, -- JSON cosmic.Spec
	status     TEXT NOT NULL  -- JSON cosmic.Status
);
-- One index per sort key, and team/user (the usual filters) before each of
-- the time keys; the id suffix serves the tie-break. A list first picks the
-- IDs of its page from these indexes alone, then reads those rows.
CREATE INDEX jobs_created   ON jobs (created_at, id);
CREATE INDEX jobs_updated   ON jobs (updated_at, id);
CREATE INDEX jobs_name      ON jobs (name, id);
CREATE INDEX jobs_state     ON jobs (state, created_at, id);
CREATE INDEX jobs_team      ON jobs (team, state, created_at, id);
CREATE INDEX jobs_team_upd  ON jobs (team, updated_at, id);
CREATE INDEX jobs_user      ON jobs (user_name, created_at, id);
-- Covers every filter and sort column by ID: a label selection probes it
-- for each job the label matches without reading the job's row.
CREATE INDEX jobs_cover     ON jobs (id, team, user_name, state, created_at, updated_at, name);

-- A copy of each job's spec.labels, for indexed label selection.
CREATE TABLE job_labels (
	job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
	key    TEXT NOT NULL,
	value  TEXT NOT NULL,
	PRIMARY KEY (job_id, key)
) WITHOUT ROWID;
CREATE INDEX job_labels_kv ON job_labels (key, value, job_id);

CREATE TABLE racks (
	id           TEXT PRIMARY KEY,
	rack         TEXT NOT NULL, -- JSON cosmic.Rack
	worker_addrs TEXT NOT NULL, -- JSON []string
	nodes        TEXT NOT NULL  -- JSON []cosmic.Node
);

-- A reservation: the GPUs of one replica of a job, on one rack.
CREATE TABLE reservations (
	job_id  TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
	replica INTEGER NOT NULL,
	rack    TEXT NOT NULL REFERENCES racks (id),
	PRIMARY KEY (job_id, replica)
);
CREATE INDEX reservations_rack ON reservations (rack);

-- One row per claimed GPU. The UNIQUE constraint is the guarantee that no
-- GPU is ever claimed twice.
CREATE TABLE reservation_gpus (
	job_id    TEXT NOT NULL,
	replica   INTEGER NOT NULL,
	rack      TEXT NOT NULL,
	node      TEXT NOT NULL,
	node_pos  INTEGER NOT NULL, -- the node's place in Reservation.Nodes
	gpu_index INTEGER NOT NULL CHECK (gpu_index >= 0),
	UNIQUE (rack, node, gpu_index),
	FOREIGN KEY (job_id, replica) REFERENCES reservations (job_id, replica) ON DELETE CASCADE
);
CREATE INDEX reservation_gpus_job ON reservation_gpus (job_id, replica, node_pos, gpu_index);

CREATE TABLE teams (
	name TEXT PRIMARY KEY
);

CREATE TABLE users (
	name TEXT PRIMARY KEY,
	team TEXT NOT NULL REFERENCES teams (name),
	role TEXT NOT NULL
);
CREATE INDEX users_team ON users (team);

CREATE TABLE tokens (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL,
	user_name  TEXT NOT NULL REFERENCES users (name) ON DELETE CASCADE,
	hash       BLOB NOT NULL UNIQUE,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL -- 0 = never
);
CREATE INDEX tokens_user ON tokens (user_name);
