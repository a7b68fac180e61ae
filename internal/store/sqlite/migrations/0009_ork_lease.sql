-- 0009: leases that elect one leader among processes sharing the database
-- (the orks, lease 'ork'). epoch grows by one at each change of holder and
-- fences writes (store.Tx.CheckLease); expires_at is nanoseconds since the
-- Unix epoch by the database's clock.

CREATE TABLE IF NOT EXISTS leases (
	name       TEXT PRIMARY KEY,
	holder     TEXT NOT NULL,
	epoch      INTEGER NOT NULL CHECK (epoch > 0),
	expires_at INTEGER NOT NULL
);
