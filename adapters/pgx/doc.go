// Package pgxoutbox publishes Outboxer messages through pgx v5
// (github.com/jackc/pgx/v5) without database/sql: in a pgx.Tx, or through a
// *pgxpool.Pool, *pgxpool.Conn or *pgx.Conn.
//
// The import path ends in pgx; the package is named pgxoutbox so that it does not
// shadow pgx itself.
//
// Executor turns any of these handles into the core's executor (core.Executor,
// core.Querier and core.Transactional: statements go through the handle's Exec and Query,
// and it is a transaction exactly when it is a pgx.Tx). Publishing in a pgx.Tx stores the
// message if and only if that transaction commits:
//
//	tx, _ := pool.Begin(ctx)
//	defer tx.Rollback(ctx)
//	tx.Exec(ctx, `INSERT INTO orders (id, note) VALUES ($1, $2)`, id, note)
//	pgxoutbox.Publish(ctx, ob, tx, OrderPlaced{ID: id})
//	tx.Commit(ctx)
//
// InTx does the same in one call with a *core.TxPublisher, rolls back on an error or a
// panic, and wakes the instance's workers as soon as the transaction commits.
//
// The instance itself (core.New, Run, Drain, the admin calls) works on a *sql.DB. A
// service that has only a pool gets one over the same pool with
// stdlib.OpenDBFromPool(pool) (github.com/jackc/pgx/v5/stdlib).
//
// # Outside a transaction
//
// Publish with a pool or a connection stores the message at once, atomically on its own
// (in a transaction of its own when an outbox has SerializeWrites, whose lock lasts until
// commit); PublishAll of several messages runs in a transaction of its own, so that all or
// none are stored. An instance with Config.RequireTransaction refuses either with
// core.ErrNotInTransaction.
//
// # Savepoints
//
// Begin on a pgx.Tx makes a savepoint, and so does InTx with a pgx.Tx. When the nested
// function fails, pgx rolls back to the savepoint: the messages published inside it are
// gone with the rows written inside it, while those published before or after it commit
// with the outer transaction.
//
// # Notify behind a pooler
//
// NewListener gives core.Config.NotifyListener sessions of their own on pgx connections:
// the instance's DB may go through PgBouncer, RDS Proxy or Supavisor in transaction mode
// (where LISTEN does not stay on a session) or use another driver, while the relay
// listens on PostgreSQL itself.
//
// # Migrations
//
// Migrate and MigrateDown run core.MigrationSQL's PostgreSQL DDL through pgx in one
// transaction: the same tables as core.Migrate. Migrations holds the same DDL for the
// default table as plain SQL files; a test keeps them equal to the core's.
package pgxoutbox
