CREATE TABLE IF NOT EXISTS "outboxer_messages" (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	outbox TEXT NOT NULL,
	type TEXT NOT NULL DEFAULT '',
	group_key TEXT NOT NULL DEFAULT '',
	part INTEGER NOT NULL DEFAULT 0,
	payload BLOB NOT NULL,
	headers TEXT,
	state INTEGER NOT NULL DEFAULT 0,
	attempts INTEGER NOT NULL DEFAULT 0,
	last_error TEXT,
	available_at INTEGER NOT NULL DEFAULT (CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER) * 1000),
	created_at INTEGER NOT NULL DEFAULT (CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER) * 1000),
	delivered_at INTEGER
);

CREATE INDEX IF NOT EXISTS "outboxer_messages_pending" ON "outboxer_messages" (outbox, part, id) WHERE state = 0;

CREATE INDEX IF NOT EXISTS "outboxer_messages_dead" ON "outboxer_messages" (outbox, id) WHERE state = 2;

CREATE INDEX IF NOT EXISTS "outboxer_messages_delivered" ON "outboxer_messages" (outbox, delivered_at) WHERE state = 1;

CREATE INDEX IF NOT EXISTS "outboxer_messages_waiting" ON "outboxer_messages" (outbox, part, available_at) WHERE state = 3;

CREATE INDEX IF NOT EXISTS "outboxer_messages_blocking" ON "outboxer_messages" (outbox, part, group_key, id) WHERE state IN (3, 4);

CREATE INDEX IF NOT EXISTS "outboxer_messages_ready_group" ON "outboxer_messages" (group_key, outbox, part, id) WHERE state < 1;

UPDATE "outboxer_messages" SET state = 3 WHERE state = 0 AND available_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER);

CREATE TABLE IF NOT EXISTS "outboxer_messages_leases" (
	outbox TEXT NOT NULL,
	part INTEGER NOT NULL,
	owner TEXT NOT NULL DEFAULT '',
	token INTEGER NOT NULL DEFAULT 0,
	expires_at INTEGER NOT NULL DEFAULT 0,
	paused INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (outbox, part)
);

CREATE TABLE IF NOT EXISTS "outboxer_messages_nodes" (
	outbox TEXT NOT NULL,
	node TEXT NOT NULL,
	max_parts INTEGER NOT NULL DEFAULT 0,
	joined_at INTEGER NOT NULL,
	seen_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	PRIMARY KEY (outbox, node)
);

