package core

import (
	"context"
	"database/sql"
	"strings"

	"github.com/outboxer-go/outboxer/core/internal/dialect"
)

// The engine's own statements need READ COMMITTED: a fetch must not see rows of a
// transaction that may still roll back, and a confirmation must not fail because the
// pool's default is SERIALIZABLE. The pool's default is not to be trusted either way.

// txOptions are the options of the engine's transactions: READ COMMITTED where the
// database has isolation levels (SQLite's transactions are serializable and cannot fail
// for it).
func (o *Outboxer) txOptions() *sql.TxOptions {
	if o.kind == dialect.SQLite {
		return nil
	}
	return &sql.TxOptions{Isolation: sql.LevelReadCommitted}
}

const (
	isolationUnknown int32 = iota
	isolationFine          // single statements may run on the pool as they are
	isolationStrict        // single statements of the engine run in a READ COMMITTED transaction
)

// strictIsolation reports whether the pool's default isolation is one the engine's single
// statements cannot run at: READ UNCOMMITTED on MySQL (a fetch would read rows that may
// roll back), anything but READ COMMITTED on PostgreSQL (SERIALIZABLE reads take part in
// the conflicts of the application's transactions). It asks the database once; when it
// cannot tell, it answers true for this call.
func (o *Outboxer) strictIsolation(ctx context.Context) bool { return o.strictOn(ctx, o.cfg.DB) }

// strictOn is strictIsolation, asking on db (a connection of the pool) when it must ask.
func (o *Outboxer) strictOn(ctx context.Context, db interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) bool {
	switch o.isolation.Load() {
	case isolationFine:
		return false
	case isolationStrict:
		return true
	}
	var level string
	var err error
	switch o.kind {
	case dialect.SQLite:
		o.isolation.Store(isolationFine)
		return false
	case dialect.Postgres:
		err = db.QueryRowContext(ctx, `SHOW transaction_isolation`).Scan(&level)
	case dialect.MySQL:
		// MySQL 8 knows only the first name, MariaDB before 11.1 only the second.
		if err = db.QueryRowContext(ctx, `SELECT @@transaction_isolation`).Scan(&level); err != nil {
			err = db.QueryRowContext(ctx, `SELECT @@tx_isolation`).Scan(&level)
		}
	}
	if err != nil {
		return true
	}
	level = strings.ToUpper(strings.ReplaceAll(level, "-", " "))
	strict := level == "READ UNCOMMITTED"
	if o.kind == dialect.Postgres {
		strict = level != "READ COMMITTED"
	}
	if strict {
		o.isolation.Store(isolationStrict)
		o.cfg.Logger.Info("outboxer: the pool's default isolation is " + level + "; the engine reads in READ COMMITTED transactions")
	} else {
		o.isolation.Store(isolationFine)
	}
	return strict
}

// handle is what the engine runs its statements on: the pool, or a transaction of it.
type handle interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// committed runs f, statements of the engine outside any transaction of its own, on the
// pool as it is when its default isolation is one they can run at, otherwise in a READ
// COMMITTED transaction that commits when f returns nil. On PostgreSQL at SERIALIZABLE,
// a read of the messages table on the pool would take part in the serialization
// conflicts of the application's transactions that publish, and fail them.
func (o *Outboxer) committed(ctx context.Context, f func(db handle) error) error {
	if !o.strictIsolation(ctx) {
		return f(o.cfg.DB)
	}
	tx, err := o.cfg.DB.BeginTx(ctx, o.txOptions())
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// queryCommitted runs query on the pool as committed does and calls each for every row.
func (o *Outboxer) queryCommitted(ctx context.Context, query string, args []any, each func(scan func(dest ...any) error) error) error {
	return o.committed(ctx, func(db handle) error { return queryRows(ctx, db, query, args, each) })
}

// execCommitted runs one statement of the engine on the pool, in a READ COMMITTED
// transaction of its own when the pool's default isolation is one it cannot run at.
func (o *Outboxer) execCommitted(ctx context.Context, query string, args ...any) error {
	return o.committed(ctx, func(db handle) error {
		_, err := db.ExecContext(ctx, query, args...)
		return err
	})
}
