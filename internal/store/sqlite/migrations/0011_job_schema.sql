-- 0011: the schema version of each job's stored JSON (issue 33,
-- docs/store.md "Stored jobs").
--
-- spec and status are cosmic.Spec and cosmic.Status as JSON. A field
-- renamed or removed there is a new cosmic.JobSchemaVersion and an upgrade
-- of the older rows' JSON (cosmic.UpgradeJobJSON), applied as they are
-- read; a row of a version newer than the binary knows is refused, not
-- misread. The rows before this migration are version 1.
ALTER TABLE jobs ADD COLUMN schema_version INTEGER NOT NULL DEFAULT 1;
