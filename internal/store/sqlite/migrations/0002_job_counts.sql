-- 0002: exact job counts per (team, user, state), kept by triggers, so that
-- the total of a list filtered only by team, user and states is a sum over
-- a few rows instead of a count over every matching job.

CREATE TABLE job_counts (
	team      TEXT NOT NULL,
	user_name TEXT NOT NULL,
	state     TEXT NOT NULL,
	n         INTEGER NOT NULL CHECK (n > 0),
	PRIMARY KEY (team, user_name, state)
) WITHOUT ROWID;
-- Without a team, a list by user or by state sums over one of these.
CREATE INDEX job_counts_user  ON job_counts (user_name, state, n);
CREATE INDEX job_counts_state ON job_counts (state, n);

INSERT INTO job_counts (team, user_name, state, n)
	SELECT team, user_name, state, count(*) FROM jobs GROUP BY team, user_name, state;

CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs BEGIN
	INSERT INTO job_counts (team, user_name, state, n) VALUES (new.team, new.user_name, new.state, 1)
		ON CONFLICT (team, user_name, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER job_counts_delete AFTER DELETE ON jobs BEGIN
	DELETE FROM job_counts WHERE team = old.team AND user_name = old.user_name AND state = old.state AND n = 1;
	UPDATE job_counts SET n = n - 1 WHERE team = old.team AND user_name = old.user_name AND state = old.state;
END;

CREATE TRIGGER job_counts_update AFTER UPDATE OF team, user_name, state ON jobs
	WHEN old.team IS NOT new.team OR old.user_name IS NOT new.user_name OR old.state IS NOT new.state
BEGIN
	DELETE FROM job_counts WHERE team = old.team AND user_name = old.user_name AND state = old.state AND n = 1;
	UPDATE job_counts SET n = n - 1 WHERE team = old.team AND user_name = old.user_name AND state = old.state;
	INSERT INTO job_counts (team, user_name, state, n) VALUES (new.team, new.user_name, new.state, 1)
		ON CONFLICT (team, user_name, state) DO UPDATE SET n = n + 1;
END;
