-- 0010: the app-node's sign-in rate limits, shared by every app-node on the
-- database (store.SignInLimits): one GCRA time per key, the nanosecond at
-- which the key's bucket is full again. Rows past it are pruned.
-- (0009 is the ork leader lease's, on a parallel branch.)

CREATE TABLE IF NOT EXISTS signin_limits (
	key text COLLATE "C" PRIMARY KEY,
	tat bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS signin_limits_tat ON signin_limits (tat);
