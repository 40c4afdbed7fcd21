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
func (o *Outboxer) strictIsolation(ctx context.Context) bool {
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
		err = o.cfg.DB.QueryRowContext(ctx, `SHOW transaction_isolation`).Scan(&level)
	case dialect.MySQL:
		// MySQL 8 knows only the first name, MariaDB before 11.1 only the second.
		if err = o.cfg.DB.QueryRowContext(ctx, `SELECT @@transaction_isolation`).Scan(&level); err != nil {
			err = o.cfg.DB.QueryRowContext(ctx, `SELECT @@tx_isolation`).Scan(&level)
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

// execCommitted runs one statement of the engine on the pool, in a READ COMMITTED
// transaction of its own when the pool's default isolation is one it cannot run at.
func (o *Outboxer) execCommitted(ctx context.Context, query string, args ...any) error {
	if !o.strictIsolation(ctx) {
		_, err := o.cfg.DB.ExecContext(ctx, query, args...)
		return err
	}
	tx, err := o.cfg.DB.BeginTx(ctx, o.txOptions())
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, query, args...); err != nil {
		return err
	}
	return tx.Commit()
}
