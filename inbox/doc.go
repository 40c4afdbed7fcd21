// Package inbox gives consumers of outbox messages an effectively-once effect: it
// records each received message's key in the consumer's own database transaction,
// before the handler's writes, so that the record and the writes commit or roll back
// together, and a message delivered again (by the relay after a crash, or by the
// broker) is reported as a Duplicate instead of running the handler a second time.
//
// # Using it
//
// Create the tables once (Migrate, or the SQL text of MigrationSQL for a migration
// tool), build an Inbox with New, and for each received message either call Handle,
// which begins the transaction, claims, runs the handler and commits, or call Claim
// yourself as the first statement of a transaction you run. Acknowledge the message to
// the broker only after the commit. Each sink's module has a helper that does all this
// for its broker: kafka.NewConsumer (franz-go), sqs.NewConsumer,
// watermillsink.Middleware and riversink.NewInboxWorker.
//
// The key to claim is core.MessageKey of the row (a UUID derived from a name of the
// database, the outbox table and the row's ID), read from the message as
// core.HeaderKey ("outboxer-key") by KeyFromHeaders: the same on every delivery of a
// row and different for any other row. (The Watermill sink's message UUID is that key
// for the empty database name.)
//
// # Messages without a key
//
// A message that carries no key was not written by an outboxer sink: a record another
// producer wrote to a topic the relay shares, a message sent to the queue by hand. The
// inbox cannot deduplicate it, and the handler, written for outbox messages, is not
// run for it. Each helper hands it to a ForeignPolicy instead, the same type for all
// four (kafka.ConsumerConfig.OnForeign, sqs.ConsumerConfig.OnForeign,
// watermillsink.OnForeign, riversink.OnForeign). The default, SkipForeign, logs a
// warning and acknowledges the message, so that the consumer goes on past it (a Kafka
// consumer commits past its offset) and does not meet it again; StopOnForeign refuses
// it with an error matching ErrNoKey, and the consumer stops at it; a function of
// yours can dead-letter it (ForeignMessage carries its payload and headers) before it
// is acknowledged. The helpers report such a message with the outcome Foreign.
//
// # Racing consumers
//
// When two consumers receive the same message at once, the second's Claim waits for
// the first's transaction: it reports Duplicate if the first committed, and claims the
// message (the handler runs) if it rolled back. On PostgreSQL and MariaDB the wait is
// on the one key; on SQLite, where one transaction writes at a time, the second
// consumer's whole transaction waits for the first's (begin SQLite transactions
// IMMEDIATE, as the project's recommended DSN does, or a second transaction that read
// first may fail with SQLITE_BUSY instead of waiting). On PostgreSQL, use READ
// COMMITTED (the default): at REPEATABLE READ or SERIALIZABLE the second fails with a
// serialization error instead, which a retry of the transaction turns into Duplicate.
// On MariaDB, when two or more consumers wait on a key and the first rolls back, the
// waiters can deadlock on it (InnoDB's shared-then-exclusive lock of a duplicate
// insert): one claims, and the others fail with error 1213 (SQLSTATE 40001), which a
// retry turns into Duplicate. Neither error runs the handler twice: Handle (and the
// consumer helpers built on it) runs such a transaction again by itself, up to
// HandleAttempts times; a consumer calling Claim in a transaction of its own retries
// it, as after any deadlock.
//
// # The dedup window
//
// Records are kept for Config.Window (default seven days) and then pruned (Prune, or
// Run in a goroutine). The window is the dedup window, not a cleanup policy: a message
// delivered again after its record was pruned runs again. Make it longer than any
// delay after which your relay or broker can redeliver: New refuses a window shorter
// than Config.RedeliveryBound (an SQS queue's visibility timeout × its maximum
// receives, the sum of a River job's retry delays), and CheckRedelivery checks any
// further bound you know. The relay redelivers a message only while it is pending in
// the outbox (a batch whose confirmation was lost), so its bound is how long a
// delivered row can stay pending: a lease takeover and the backoff after a failed
// confirmation, normally seconds, but as long as the outbox's database stays
// unreachable. A dead message that is retried (RetryDead) after the window runs again.
// On MariaDB a prune can deadlock with the claims running at the same time (error
// 1213): Run tries again at its next tick, and a consumer whose transaction was the
// victim rolled back; Handle runs it again.
//
// # The stale check (optional)
//
// With Config.StaleCheck, Claim also keeps, per consumer and group (Message.Group; for
// outbox messages GroupOf(outbox, group key)), the highest Seq (the outbox ID) claimed.
// A new message whose Seq is not above it is reported as Stale: an older message of the
// group arriving after a later one. That happens when a dead message is retried
// (RetryDead) after the messages behind it got through, when the broker redelivers an
// old message after later ones were processed (a Kafka consumer restarted before
// committing its offsets, an SQS message whose visibility timeout ran out), or when
// consumers of one group run in parallel. The message's record is written all the
// same; the handler decides in the same transaction (skip it, process it anyway, or
// dead-letter it). Group marks not raised within the window are pruned with the
// records. GroupOf names a group by its outbox and group key only, not by the
// database or table (the consumer helpers receive no more): when one consumer receives
// the messages of several databases or outbox tables whose outboxes share a name,
// their IDs are compared as one sequence and one database's messages come out Stale
// behind another's; give those outboxes different names, or leave the check off.
package inbox
