-- 0015: the process start that holds a lease (store.Lease.Instance), beside
-- the holder's name: two processes given one holder name cannot both lead,
-- and a new start of a process always begins a new epoch.
ALTER TABLE leases ADD COLUMN IF NOT EXISTS instance text COLLATE "C" NOT NULL DEFAULT '';
