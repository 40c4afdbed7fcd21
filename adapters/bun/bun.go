package bunoutbox

import (
	"context"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"
	"github.com/uptrace/bun/migrate"

	"github.com/outboxer-go/outboxer/core"
)

// Executor returns the core executor behind a bun handle: the *sql.Tx of a bun.Tx (also
// one made by BeginTx on a bun.Tx, a savepoint), the *sql.DB of a *bun.DB, the *sql.Conn
// of a bun.Conn. Statements sent through it do not pass bun's query hooks. A nil handle
// (or a zero bun.Tx) gives nil, which Publish refuses with core.ErrInvalidExecutor.
func Executor(db bun.IDB) core.Executor {
	if isNil(db) {
		return nil
	}
	var exec core.Executor
	switch h := db.(type) {
	case bun.Tx:
		exec = h.Tx
	case *bun.Tx:
		exec = h.Tx
	case *bun.DB:
		exec = h.DB
	case bun.Conn:
		exec = h.Conn
	case *bun.Conn:
		exec = h.Conn
	default:
		return notTx{db}
	}
	if isNil(exec) {
		return nil
	}
	return exec
}

// notTx is an unknown bun.IDB; the core takes it as not being a transaction.
type notTx struct{ bun.IDB }

// Publish publishes msg through db, normally the bun.Tx of your business writes: the
// message is stored if and only if the transaction commits.
func Publish(ctx context.Context, ob *core.Outboxer, db bun.IDB, msg core.Message, opts ...core.PublishOption) (core.Envelope, error) {
	if Executor(db) == nil {
		return core.Envelope{}, errNil("bun handle")
	}
	return ob.Publish(ctx, Executor(db), msg, opts...)
}

// PublishAll publishes msgs through db in one statement per table.
func PublishAll(ctx context.Context, ob *core.Outboxer, db bun.IDB, msgs []core.Message, opts ...core.PublishOption) ([]core.Envelope, error) {
	if Executor(db) == nil {
		return nil, errNil("bun handle")
	}
	return ob.PublishAll(ctx, Executor(db), msgs, opts...)
}

// InTx runs fn in db.RunInTx and hands it the transaction and a publisher writing through
// it: what fn writes and publishes commits together or not at all. An error or a panic in
// fn rolls everything back (the panic goes on). After the commit the instance's workers
// are woken at once.
//
// With a bun.Tx as db, RunInTx makes a savepoint: fn's error rolls back to it only, and
// the workers are woken when the outer transaction's helper commits.
func InTx(ctx context.Context, ob *core.Outboxer, db bun.IDB, fn func(ctx context.Context, tx bun.Tx, p *core.TxPublisher) error) error {
	if Executor(db) == nil {
		return errNil("bun handle")
	}
	var nested bool
	switch db.(type) {
	case bun.Tx, *bun.Tx:
		nested = true
	}
	var p *core.TxPublisher
	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		p = ob.NewTxPublisher(tx.Tx)
		return fn(ctx, tx, p)
	})
	if err == nil && !nested {
		p.Committed()
	}
	return err
}

// Dialect is the Outboxer dialect of a bun database ("" for one Outboxer does not run on).
func Dialect(db bun.IDB) core.Dialect {
	if Executor(db) == nil {
		return ""
	}
	switch db.Dialect().Name() {
	case dialect.PG:
		return core.Postgres
	case dialect.MySQL:
		return core.MySQL
	case dialect.SQLite:
		return core.SQLite
	}
	return ""
}

// MigrationUp is a bun migration creating the outbox tables exactly as core.Migrate
// does, in the bun database's dialect unless opts names one. Register it from a migration
// file of yours:
//
//	// 20250101000000_outboxer.go
//	func init() { Migrations.MustRegister(bunoutbox.MigrationUp(opts), bunoutbox.MigrationDown(opts)) }
func MigrationUp(opts core.MigrateOptions) migrate.MigrationFunc {
	return func(ctx context.Context, db *bun.DB) error {
		return core.Migrate(ctx, db.DB, withDialect(db, opts))
	}
}

// MigrationDown is the bun migration dropping what MigrationUp created.
func MigrationDown(opts core.MigrateOptions) migrate.MigrationFunc {
	return func(ctx context.Context, db *bun.DB) error {
		return core.MigrateDown(ctx, db.DB, withDialect(db, opts))
	}
}

// AddMigration adds MigrationUp and MigrationDown to ms under name, a bun migration
// name such as "20250101000000" (migrations run in name order).
func AddMigration(ms *migrate.Migrations, name string, opts core.MigrateOptions) {
	up, down := MigrationUp(opts), MigrationDown(opts)
	ms.Add(migrate.Migration{
		Name:    name,
		Comment: "outboxer",
		Up: func(ctx context.Context, m *migrate.Migrator, _ *migrate.Migration) error {
			return up(ctx, m.DB())
		},
		Down: func(ctx context.Context, m *migrate.Migrator, _ *migrate.Migration) error {
			return down(ctx, m.DB())
		},
	})
}

func withDialect(db *bun.DB, opts core.MigrateOptions) core.MigrateOptions {
	if opts.Dialect == "" {
		opts.Dialect = Dialect(db)
	}
	return opts
}
