-- 0013: an inference API key's tokens per minute (docs/inference.md,
-- "Token limits"): the prompt and completion tokens its requests may
-- spend in a minute at each proxy-inference; 0, none.
ALTER TABLE api_key_limits ADD COLUMN tokens_per_minute INTEGER NOT NULL DEFAULT 0;
