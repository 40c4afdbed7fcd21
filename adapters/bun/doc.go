// Package bunoutbox publishes Outboxer messages through bun (github.com/uptrace/bun), in
// a bun.Tx or through any bun.IDB.
//
// The import path ends in bun; the package is named bunoutbox so that it does not shadow
// bun itself.
//
// A bun.Tx wraps a *sql.Tx; Publish hands that *sql.Tx to the core, so the message is
// stored if and only if the transaction commits:
//
//	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
//		if _, err := tx.NewInsert().Model(&order).Exec(ctx); err != nil {
//			return err
//		}
//		_, err := bunoutbox.Publish(ctx, ob, tx, OrderPlaced{ID: order.ID})
//		return err
//	})
//
// InTx is the same with a *core.TxPublisher, and it wakes the instance's workers as soon
// as the transaction commits, so the relay delivers without waiting for its next poll.
// An error or a panic in the function rolls back business rows and messages alike.
//
// The outbox statements go to the *sql.Tx directly, with the core's own placeholders, so
// bun's query hooks (bundebug, bunotel) do not see them; the core's Hooks do.
//
// # Outside a transaction
//
// Publish with a *bun.DB stores the message at once, atomically on its own. An instance
// with Config.RequireTransaction refuses it with core.ErrNotInTransaction.
//
// # Savepoints
//
// bun.Tx.BeginTx and bun.Tx.RunInTx (and so InTx with a bun.Tx) issue SAVEPOINT
// statements. When the nested function fails, bun rolls back to the savepoint: the
// messages published inside it are gone with the rows written inside it, while those
// published before or after it commit with the outer transaction.
//
// # Drivers
//
// Outboxer runs on the drivers bun's documentation sets up, with no Config.Dialect to
// set: bun's own github.com/uptrace/bun/driver/pgdriver
// (sql.OpenDB(pgdriver.NewConnector(...))), github.com/uptrace/bun/driver/sqliteshim
// (modernc.org/sqlite or mattn/go-sqlite3 under it) and go-sql-driver/mysql. Their errors
// are read from the driver's own error type: a serialization failure or deadlock
// raised through pgdriver is retried by the inbox's Handle, a missing table is
// core.ErrNotMigrated.
//
// Config.Notify needs a session that LISTENs, which database/sql cannot give through
// pgdriver: an instance whose DB is a pgdriver pool reports core.ErrNotifyNotListening in
// NotifyStatus (and logs it at Warn) and delivers by polling. Set Config.NotifyListener
// to pgxoutbox.NewListener(dsn) (module github.com/outboxer-go/outboxer/adapters/pgx) to
// listen on a pgx session of its own beside the pgdriver pool.
//
// # Migrations
//
// MigrationUp and MigrationDown are bun migrations (github.com/uptrace/bun/migrate)
// creating exactly core.Migrate's tables; register them from a migration file of yours,
// or add them under a name with AddMigration.
package bunoutbox
