-- 0002: exact job counts per (team, user, state), kept by triggers in the
-- writing transaction (as in SQLite), so that the total of a list filtered
-- only by team, user and states is a sum over a few rows.

CREATE TABLE job_counts (
	team      text COLLATE "C" NOT NULL,
	user_name text COLLATE "C" NOT NULL,
	state     text COLLATE "C" NOT NULL,
	n         bigint NOT NULL CHECK (n > 0),
	PRIMARY KEY (team, user_name, state)
);
CREATE INDEX job_counts_user  ON job_counts (user_name, state, n);
CREATE INDEX job_counts_state ON job_counts (state, n);

INSERT INTO job_counts (team, user_name, state, n)
	SELECT team, user_name, state, count(*) FROM jobs GROUP BY team, user_name, state;

CREATE FUNCTION job_counts_follow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP IN ('DELETE', 'UPDATE') THEN
		DELETE FROM job_counts WHERE team = OLD.team AND user_name = OLD.user_name AND state = OLD.state AND n = 1;
		UPDATE job_counts SET n = n - 1 WHERE team = OLD.team AND user_name = OLD.user_name AND state = OLD.state;
	END IF;
	IF TG_OP IN ('INSERT', 'UPDATE') THEN
		INSERT INTO job_counts (team, user_name, state, n) VALUES (NEW.team, NEW.user_name, NEW.state, 1)
			ON CONFLICT (team, user_name, state) DO UPDATE SET n = job_counts.n + 1;
	END IF;
	RETURN NULL;
END;
$$;

CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs
	FOR EACH ROW EXECUTE FUNCTION job_counts_follow();
CREATE TRIGGER job_counts_delete AFTER DELETE ON jobs
	FOR EACH ROW EXECUTE FUNCTION job_counts_follow();
CREATE TRIGGER job_counts_update AFTER UPDATE OF team, user_name, state ON jobs
	FOR EACH ROW WHEN (OLD.team IS DISTINCT FROM NEW.team OR OLD.user_name IS DISTINCT FROM NEW.user_name OR OLD.state IS DISTINCT FROM NEW.state)
	EXECUTE FUNCTION job_counts_follow();
