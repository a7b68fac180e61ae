-- 0004: users in several teams (members), platform admins, passwords,
-- scoped and team-bound tokens, browser sessions, the audit log.
--
-- Runs with foreign keys off (migrate checks them before committing), as
-- the users table is rebuilt without its team and role: the role of a
-- user in the team of 0001 becomes a membership, and 0001's admin role
-- (everything, racks included) becomes a platform admin who owns that team.

CREATE TABLE users_new (
	name           TEXT PRIMARY KEY,
	platform_admin INTEGER NOT NULL DEFAULT 0,
	password       TEXT NOT NULL DEFAULT '', -- PHC string (argon2id), '' for none
	created_at     INTEGER NOT NULL DEFAULT 0
);
INSERT INTO users_new (name, platform_admin) SELECT name, role = 'admin' FROM users;

CREATE TABLE members (
	team      TEXT NOT NULL REFERENCES teams (name) ON DELETE CASCADE,
	user_name TEXT NOT NULL REFERENCES users (name) ON DELETE CASCADE,
	role      TEXT NOT NULL CHECK (role IN ('owner', 'admin', 'member', 'viewer')),
	PRIMARY KEY (team, user_name)
) WITHOUT ROWID;
CREATE INDEX members_user ON members (user_name, team);
INSERT INTO members (team, user_name, role)
	SELECT team, name, CASE role WHEN 'admin' THEN 'owner' ELSE role END FROM users;

DROP INDEX users_team;
DROP TABLE users;
ALTER TABLE users_new RENAME TO users;

ALTER TABLE teams ADD COLUMN created_at INTEGER NOT NULL DEFAULT 0;

ALTER TABLE tokens ADD COLUMN kind TEXT NOT NULL DEFAULT 'token';
ALTER TABLE tokens ADD COLUMN team TEXT NOT NULL DEFAULT '';
ALTER TABLE tokens ADD COLUMN scope TEXT NOT NULL DEFAULT '';
ALTER TABLE tokens ADD COLUMN selector TEXT NOT NULL DEFAULT ''; -- JSON object, '' for none
ALTER TABLE tokens ADD COLUMN csrf BLOB;
ALTER TABLE tokens ADD COLUMN last_used_at INTEGER NOT NULL DEFAULT 0;
DROP INDEX tokens_user;
CREATE INDEX tokens_user ON tokens (user_name, kind, created_at);
CREATE INDEX tokens_team ON tokens (team) WHERE team != '';

CREATE TABLE audit (
	id        INTEGER PRIMARY KEY AUTOINCREMENT,
	at        INTEGER NOT NULL,
	user_name TEXT NOT NULL,
	team      TEXT NOT NULL,
	action    TEXT NOT NULL,
	target    TEXT NOT NULL,
	remote    TEXT NOT NULL,
	status    INTEGER NOT NULL,
	detail    TEXT NOT NULL
);
CREATE INDEX audit_at     ON audit (at);
CREATE INDEX audit_user   ON audit (user_name, id);
CREATE INDEX audit_team   ON audit (team, id);
CREATE INDEX audit_action ON audit (action, id);
