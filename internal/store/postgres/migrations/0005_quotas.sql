-- 0005: the teams' GPU quotas, per location and GPU model ('' = every model
-- of the location). No foreign key to teams: the app-node removes a deleted
-- team's quotas.

CREATE TABLE IF NOT EXISTS quotas (
	team       text COLLATE "C" NOT NULL,
	location   text COLLATE "C" NOT NULL,
	gpu_model  text COLLATE "C" NOT NULL,
	gpus       integer NOT NULL CHECK (gpus >= 0),
	updated_at bigint NOT NULL,
	updated_by text COLLATE "C" NOT NULL,
	PRIMARY KEY (team, location, gpu_model)
);
