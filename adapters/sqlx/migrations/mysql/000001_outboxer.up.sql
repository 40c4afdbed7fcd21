CREATE TABLE IF NOT EXISTS `outboxer_messages` (
	id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
	outbox VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
	type VARCHAR(255) NOT NULL DEFAULT '',
	group_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL DEFAULT '',
	part INT NOT NULL DEFAULT 0,
	payload LONGBLOB NOT NULL,
	headers TEXT,
	state TINYINT NOT NULL DEFAULT 0,
	attempts INT NOT NULL DEFAULT 0,
	last_error TEXT,
	available_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
	created_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
	delivered_at DATETIME(6),
	KEY `outboxer_messages_pending` (outbox, state, part, id),
	KEY `outboxer_messages_delivered` (outbox, state, delivered_at),
	KEY `outboxer_messages_waiting` (outbox, state, part, available_at),
	KEY `outboxer_messages_blocking` (outbox, part, group_key, state, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;

ALTER TABLE `outboxer_messages` MODIFY outbox VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL, MODIFY group_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL DEFAULT '', ADD KEY IF NOT EXISTS `outboxer_messages_waiting` (outbox, state, part, available_at), ADD KEY IF NOT EXISTS `outboxer_messages_blocking` (outbox, part, group_key, state, id);

UPDATE `outboxer_messages` SET state = 3 WHERE state = 0 AND available_at > UTC_TIMESTAMP(6);

CREATE TABLE IF NOT EXISTS `outboxer_messages_leases` (
	outbox VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
	part INT NOT NULL,
	owner VARCHAR(255) NOT NULL DEFAULT '',
	token BIGINT NOT NULL DEFAULT 0,
	expires_at DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00',
	paused TINYINT NOT NULL DEFAULT 0,
	PRIMARY KEY (outbox, part)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;

ALTER TABLE `outboxer_messages_leases` MODIFY outbox VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL;

CREATE TABLE IF NOT EXISTS `outboxer_messages_nodes` (
	outbox VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
	node VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
	max_parts INT NOT NULL DEFAULT 0,
	joined_at DATETIME(6) NOT NULL,
	seen_at DATETIME(6) NOT NULL,
	expires_at DATETIME(6) NOT NULL,
	PRIMARY KEY (outbox, node)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;

CREATE TABLE IF NOT EXISTS `outboxer_messages_locks` (
	lock_key BIGINT NOT NULL PRIMARY KEY
) ENGINE=InnoDB;

