DROP TABLE IF EXISTS "outboxer_messages_nodes";

DROP TABLE IF EXISTS "outboxer_messages_leases";

DROP TABLE IF EXISTS "outboxer_messages";

