-- 0005: the teams' GPU quotas, per location and GPU model ('' = every model
-- of the location). No foreign key to teams: the app-node removes a deleted
-- team's quotas.

CREATE TABLE IF NOT EXISTS quotas (
	team       TEXT NOT NULL,
	location   TEXT NOT NULL,
	gpu_model  TEXT NOT NULL,
	gpus       INTEGER NOT NULL CHECK (gpus >= 0),
	updated_at INTEGER NOT NULL,
	updated_by TEXT NOT NULL,
	PRIMARY KEY (team, location, gpu_model)
);
