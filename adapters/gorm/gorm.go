package gormoutbox

import (
	"context"
	"database/sql"
	"fmt"

	"gorm.io/gorm"

	"github.com/outboxer-go/outboxer/core"
)

// Executor returns the core executor behind db: the *sql.Tx when db is inside a
// Transaction (or Begin), the *sql.DB otherwise. With PrepareStmt the transaction under
// gorm's statement cache is used; a connection pool of another kind is used as it is.
// A nil db (or one with no connection) gives nil, which Publish refuses with
// core.ErrInvalidExecutor.
func Executor(db *gorm.DB) core.Executor {
	if !usable(db) {
		return nil
	}
	cp := db.Statement.ConnPool
	switch c := cp.(type) {
	case *sql.Tx:
		return c
	case *sql.DB:
		return c
	case *gorm.PreparedStmtTX:
		if tx, ok := c.Tx.(*sql.Tx); ok {
			return tx
		}
	case *gorm.PreparedStmtDB:
		if pool, ok := c.ConnPool.(*sql.DB); ok {
			return pool
		}
	}
	_, tx := cp.(gorm.TxCommitter)
	return connPool{cp, tx}
}

// usable reports whether db can run statements: not nil, and with a connection pool.
func usable(db *gorm.DB) bool {
	return db != nil && db.Config != nil && db.Statement != nil && !isNil(db.Statement.ConnPool)
}

// connPool is a gorm.ConnPool that says whether it is a transaction.
type connPool struct {
	gorm.ConnPool
	tx bool
}

func (c connPool) InTransaction() bool { return c.tx }

// Publish publishes msg through db, normally the *gorm.DB a Transaction hands you: the
// message is stored if and only if that transaction commits.
func Publish(ctx context.Context, ob *core.Outboxer, db *gorm.DB, msg core.Message, opts ...core.PublishOption) (core.Envelope, error) {
	if !usable(db) {
		return core.Envelope{}, errNil("*gorm.DB")
	}
	return ob.Publish(ctx, Executor(db), msg, opts...)
}

// PublishAll publishes msgs through db in one statement per table.
func PublishAll(ctx context.Context, ob *core.Outboxer, db *gorm.DB, msgs []core.Message, opts ...core.PublishOption) ([]core.Envelope, error) {
	if !usable(db) {
		return nil, errNil("*gorm.DB")
	}
	return ob.PublishAll(ctx, Executor(db), msgs, opts...)
}

// InTx runs fn in db.Transaction and hands it the transaction and a publisher writing
// through it: what fn writes and publishes commits together or not at all. An error or a
// panic in fn rolls everything back (the panic goes on). After the commit the instance's
// workers are woken at once.
//
// Called with a db that is already in a transaction, InTx is gorm's nested Transaction:
// a savepoint. fn's error then rolls back to the savepoint only, and the workers are
// woken when the outer transaction's helper commits.
func InTx(ctx context.Context, ob *core.Outboxer, db *gorm.DB, fn func(tx *gorm.DB, p *core.TxPublisher) error, opts ...*sql.TxOptions) error {
	if !usable(db) {
		return errNil("*gorm.DB")
	}
	_, nested := db.Statement.ConnPool.(gorm.TxCommitter)
	var p *core.TxPublisher
	err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		p = ob.NewTxPublisher(Executor(tx))
		return fn(tx, p)
	}, opts...)
	if err == nil && !nested {
		p.Committed()
	}
	return err
}

// Migrate creates the outbox tables, exactly as core.Migrate does, on the database of db,
// in the dialect of db's Dialector unless opts names one. Call it next to AutoMigrate.
func Migrate(ctx context.Context, db *gorm.DB, opts core.MigrateOptions) error {
	pool, opts, err := migrateArgs(db, opts)
	if err != nil {
		return err
	}
	return core.Migrate(ctx, pool, opts)
}

// MigrateDown drops what Migrate created, with every message in it.
func MigrateDown(ctx context.Context, db *gorm.DB, opts core.MigrateOptions) error {
	pool, opts, err := migrateArgs(db, opts)
	if err != nil {
		return err
	}
	return core.MigrateDown(ctx, pool, opts)
}

func migrateArgs(db *gorm.DB, opts core.MigrateOptions) (*sql.DB, core.MigrateOptions, error) {
	if !usable(db) {
		return nil, opts, fmt.Errorf("outboxer: migrate: %w", errNil("*gorm.DB"))
	}
	pool, err := db.DB()
	if err != nil {
		return nil, opts, fmt.Errorf("outboxer: migrate: %w", err)
	}
	if opts.Dialect == "" {
		opts.Dialect = Dialect(db)
	}
	return pool, opts, nil
}

// Dialect is the Outboxer dialect of db's Dialector ("" when it is none of PostgreSQL,
// MySQL/MariaDB and SQLite). Use it for core.Config.Dialect when the driver under gorm is
// not one core.DetectDialect knows.
func Dialect(db *gorm.DB) core.Dialect {
	if db == nil || db.Config == nil || db.Dialector == nil {
		return ""
	}
	switch db.Dialector.Name() {
	case "postgres":
		return core.Postgres
	case "mysql":
		return core.MySQL
	case "sqlite", "sqlite3":
		return core.SQLite
	}
	return ""
}
