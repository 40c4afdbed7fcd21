// Package adaptertest is the conformance suite every ORM adapter of Outboxer runs: the
// same cases, against real databases (PostgreSQL, MariaDB and SQLite through dbtest),
// for gorm, bun, ent, sqlx and pgx alike.
//
// An adapter's test describes its ORM with an Adapter (how to open the ORM on a test
// database, begin a transaction, write a business row, publish, nest a savepoint) and
// calls Run. The cases:
//
//   - CommitStores: business rows and messages written in the run-in-transaction helper
//     are stored together, in order, and Drain relays them.
//   - ErrorRollsBack, PanicRollsBack: an error or a panic in the function leaves neither
//     rows nor messages (and the panic goes on).
//   - OpenTxCommitAndRollback: the ORM's own transaction, committed or rolled back.
//   - OptionsRoundTrip: WithGroupKey, WithHeaders (merged over the message's own),
//     WithOutbox, WithDelay and WithAvailableAt are stored as given.
//   - RequireTransaction: the ORM's pool is refused with core.ErrNotInTransaction when the
//     instance asks; transactions still work.
//   - NoTransactionStoresAtOnce: without RequireTransaction the pool publishes, committed
//     on its own.
//   - SavepointRollback: a message published in a savepoint that rolls back is gone; the
//     rest of the transaction stays.
//   - CommitWakesRelay: after the helper commits, a running instance delivers at once,
//     although its poll interval is an hour.
//
// Bench compares publishing through the adapter with the core's own Publish, and
// CheckMigration compares an adapter's migration with core.Migrate.
package adaptertest
