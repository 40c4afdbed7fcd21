package sqlxoutbox

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/outboxer-go/outboxer/core"
)

// Executor returns the core executor behind an sqlx handle: the *sql.Tx of a *sqlx.Tx,
// the *sql.DB of a *sqlx.DB. Any other sqlx.ExtContext is used as it is and counts as
// not being a transaction. A nil handle gives nil, which Publish refuses with
// core.ErrInvalidExecutor.
func Executor(db sqlx.ExtContext) core.Executor {
	var exec core.Executor = db
	switch h := db.(type) {
	case *sqlx.Tx:
		if h != nil {
			exec = h.Tx
		}
	case *sqlx.DB:
		if h != nil {
			exec = h.DB
		}
	}
	if isNil(exec) {
		return nil
	}
	return exec
}

// Publish publishes msg through db, normally the *sqlx.Tx of your business writes: the
// message is stored if and only if it commits.
func Publish(ctx context.Context, ob *core.Outboxer, db sqlx.ExtContext, msg core.Message, opts ...core.PublishOption) (core.Envelope, error) {
	return ob.Publish(ctx, Executor(db), msg, opts...)
}

// PublishAll publishes msgs through db in one statement per table.
func PublishAll(ctx context.Context, ob *core.Outboxer, db sqlx.ExtContext, msgs []core.Message, opts ...core.PublishOption) ([]core.Envelope, error) {
	return ob.PublishAll(ctx, Executor(db), msgs, opts...)
}

// InTx runs fn in a transaction of db (opts may be nil) and commits it if fn returns nil:
// what fn writes through tx and publishes through p commits together or not at all. An
// error or a panic in fn rolls everything back (the panic goes on). After the commit the
// instance's workers are woken at once.
func InTx(ctx context.Context, ob *core.Outboxer, db *sqlx.DB, opts *sql.TxOptions, fn func(tx *sqlx.Tx, p *core.TxPublisher) error) error {
	if db == nil || db.DB == nil {
		return errNil("*sqlx.DB")
	}
	tx, err := db.BeginTxx(ctx, opts)
	if err != nil {
		return fmt.Errorf("outboxer: begin: %w", err)
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback()
		}
	}()
	p := ob.NewTxPublisher(tx.Tx)
	if err := fn(tx, p); err != nil {
		return err
	}
	done = true
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outboxer: commit: %w", err)
	}
	p.Committed()
	return nil
}

// Savepoint runs fn inside a savepoint of tx named name (letters, digits and _). When fn
// returns an error or panics, the transaction goes back to the savepoint, dropping what
// fn wrote and published, and the error is returned (the panic goes on); the rest of tx
// is kept. Otherwise the savepoint is released. PostgreSQL, MariaDB and SQLite all
// support savepoints.
func Savepoint(ctx context.Context, tx *sqlx.Tx, name string, fn func() error) error {
	if tx == nil || tx.Tx == nil {
		return errNil("*sqlx.Tx")
	}
	return core.Savepoint(ctx, tx, name, fn)
}

// Migrate creates the outbox tables through db, exactly as core.Migrate does. The same
// DDL, as plain SQL files for golang-migrate, goose or a hand-run script, is in the
// migrations directory of this module.
func Migrate(ctx context.Context, db *sqlx.DB, opts core.MigrateOptions) error {
	if db == nil || db.DB == nil {
		return fmt.Errorf("outboxer: migrate: %w", errNil("*sqlx.DB"))
	}
	return core.Migrate(ctx, db.DB, opts)
}

// MigrateDown drops what Migrate created, with every message in it.
func MigrateDown(ctx context.Context, db *sqlx.DB, opts core.MigrateOptions) error {
	if db == nil || db.DB == nil {
		return fmt.Errorf("outboxer: migrate: %w", errNil("*sqlx.DB"))
	}
	return core.MigrateDown(ctx, db.DB, opts)
}
