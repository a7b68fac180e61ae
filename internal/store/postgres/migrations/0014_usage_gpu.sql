-- 0014: GPU-seconds in the usage (store.UsageRow.GPUSeconds): what each
-- job held, as the ork samples its reservations, on the rows of the job's
-- team with no key.
ALTER TABLE usage ADD COLUMN IF NOT EXISTS gpu_seconds bigint NOT NULL DEFAULT 0;
