// Package gormoutbox publishes Outboxer messages through GORM (gorm.io/gorm), in the
// transaction of your business writes.
//
// The import path ends in gorm; the package is named gormoutbox so that it does not
// shadow GORM itself.
//
// Inside db.Transaction, GORM runs every statement on a *sql.Tx (its
// Statement.ConnPool); Publish hands that same *sql.Tx to the core, so the message is
// stored if and only if the transaction commits:
//
//	err := db.Transaction(func(tx *gorm.DB) error {
//		if err := tx.Create(&order).Error; err != nil {
//			return err
//		}
//		_, err := gormoutbox.Publish(ctx, ob, tx, OrderPlaced{ID: order.ID})
//		return err
//	})
//
// InTx is the same with a *core.TxPublisher, and it wakes the instance's workers as soon
// as the transaction commits, so the relay delivers without waiting for its next poll.
// An error or a panic in the function rolls back the business rows and the messages alike.
// PrepareStmt works too: Publish then goes to the transaction under GORM's statement
// cache.
//
// # Outside a transaction
//
// Publish with a *gorm.DB that is not in a transaction stores the message at once,
// atomically on its own. An instance with Config.RequireTransaction refuses it with
// core.ErrNotInTransaction.
//
// # Nested transactions
//
// A Transaction (or InTx) inside a transaction is a savepoint in GORM. When the nested
// function fails, GORM rolls back to the savepoint: the messages published inside it are
// gone with the rows written inside it, while those published before or after it commit
// with the outer transaction. With DisableNestedTransaction set, GORM makes no savepoint
// and a failing nested function only returns its error: what it published stays unless
// the outer transaction rolls back.
//
// # Migrations
//
// Migrate creates the outbox tables exactly as core.Migrate does, on the database under
// the *gorm.DB and in its Dialector's dialect; call it beside AutoMigrate. The outbox
// table is not a GORM model: AutoMigrate would not build its partial indexes.
//
// # SQLite
//
// GORM's SQLite dialectors bring their own drivers. To use the pure-Go
// modernc.org/sqlite (the one Outboxer's own tests use), open a *sql.DB with it and hand
// that to gorm.io/driver/sqlite as Config.Conn, as the example does; the dialect then
// comes from core.DetectDialect or from Dialect(db).
package gormoutbox
