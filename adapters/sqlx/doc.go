// Package sqlxoutbox publishes Outboxer messages through sqlx (github.com/jmoiron/sqlx):
// in a *sqlx.Tx, or through any sqlx.ExtContext.
//
// The import path ends in sqlx; the package is named sqlxoutbox so that it does not
// shadow sqlx itself.
//
// A *sqlx.Tx is a *sql.Tx with sqlx's helpers, so publishing in it is the core's own
// Publish with the embedded *sql.Tx: the message is stored if and only if the
// transaction commits.
//
//	tx, _ := db.BeginTxx(ctx, nil)
//	tx.NamedExecContext(ctx, `INSERT INTO orders (id, note) VALUES (:id, :note)`, order)
//	sqlxoutbox.Publish(ctx, ob, tx, OrderPlaced{ID: order.ID})
//	tx.Commit()
//
// InTx does the same in one call: it begins, runs your function with the transaction and
// a *core.TxPublisher, commits, rolls back on an error or a panic, and wakes the
// instance's workers after the commit so the relay delivers at once.
//
// # Outside a transaction
//
// Publish with a *sqlx.DB stores the message at once, atomically on its own. An instance
// with Config.RequireTransaction refuses it with core.ErrNotInTransaction.
//
// # Savepoints
//
// sqlx has no nested transactions; Savepoint runs a function between SAVEPOINT and
// RELEASE SAVEPOINT statements. When the function fails, the transaction goes back to
// the savepoint: the messages published inside it are gone with the rows written inside
// it, while those published before or after it commit with the transaction. This holds on
// PostgreSQL, MariaDB and SQLite alike.
//
// # Migrations
//
// Migrate and MigrateDown run core.Migrate through the *sqlx.DB. For golang-migrate,
// goose or a hand-run script, Migrations holds the same DDL as plain SQL files per
// dialect (migrations/postgres, migrations/mysql, migrations/sqlite); a test keeps them
// equal to core.MigrationSQL. They create the default table, outboxer_messages; for
// another name, use core.MigrationSQL.
package sqlxoutbox
