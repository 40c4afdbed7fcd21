package pgxoutbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxer-go/outboxer/core"
)

// DB is what the pgx handles share: *pgx.Conn, pgx.Tx, *pgxpool.Pool, *pgxpool.Conn.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Beginner begins a transaction: *pgx.Conn, *pgxpool.Pool and *pgxpool.Conn do, and a
// pgx.Tx begins a savepoint.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Executor returns a core executor running statements through db. It is a transaction
// exactly when db is a pgx.Tx. A nil handle gives nil, which Publish refuses with
// core.ErrInvalidExecutor.
func Executor(db DB) core.Executor {
	if isNil(db) {
		return nil
	}
	_, tx := db.(pgx.Tx)
	return executor{db: db, tx: tx}
}

// executor implements core.Executor, core.Querier and core.Transactional over pgx.
type executor struct {
	db DB
	tx bool
}

func (e executor) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	tag, err := e.db.Exec(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return result(tag.RowsAffected()), nil
}

func (e executor) QueryRows(ctx context.Context, query string, args []any, each func(scan func(dest ...any) error) error) error {
	rows, err := e.db.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (e executor) InTransaction() bool { return e.tx }

type result int64

func (r result) LastInsertId() (int64, error) {
	return 0, errors.New("outboxer: pgx reports no last insert ID; use RETURNING")
}
func (r result) RowsAffected() (int64, error) { return int64(r), nil }

// Publish publishes msg through db, normally the pgx.Tx of your business writes: the
// message is stored if and only if the transaction commits. With a pool or a connection
// it is stored at once, atomically on its own, unless the instance has
// RequireTransaction (then core.ErrNotInTransaction).
func Publish(ctx context.Context, ob *core.Outboxer, db DB, msg core.Message, opts ...core.PublishOption) (core.Envelope, error) {
	envs, err := PublishAll(ctx, ob, db, []core.Message{msg}, opts...)
	if err != nil {
		return core.Envelope{}, err
	}
	return envs[0], nil
}

// PublishAll publishes msgs through db in one statement per table.
func PublishAll(ctx context.Context, ob *core.Outboxer, db DB, msgs []core.Message, opts ...core.PublishOption) ([]core.Envelope, error) {
	if isNil(db) {
		return nil, errNil("pgx handle")
	}
	exec := Executor(db)
	if b, ok := db.(Beginner); ok && !exec.(executor).tx && needsOwnTx(ob, len(msgs)) {
		// SerializeWrites holds its lock until commit, and several messages may take
		// statements that must commit together: give the publish a transaction.
		var envs []core.Envelope
		err := InTx(ctx, ob, b, func(ctx context.Context, _ pgx.Tx, p *core.TxPublisher) error {
			var err error
			envs, err = p.PublishAll(ctx, msgs, opts...)
			return err
		})
		return envs, err
	}
	return ob.PublishAll(ctx, exec, msgs, opts...)
}

func needsOwnTx(ob *core.Outboxer, messages int) bool {
	cfg := ob.Config()
	if cfg.RequireTransaction {
		return false // the core refuses the handle
	}
	if messages > 1 {
		return true
	}
	for _, oc := range cfg.Outboxes {
		if oc.SerializeWrites {
			return true
		}
	}
	return false
}

// InTx begins a transaction on db, runs fn with it and a publisher writing through it,
// and commits if fn returns nil: what fn writes and publishes commits together or not at
// all. An error or a panic in fn rolls everything back (the panic goes on). After the
// commit the instance's workers are woken at once.
//
// With a pgx.Tx as db the transaction is a savepoint: fn's error rolls back to it only,
// and the workers are woken when the outer transaction's helper commits.
func InTx(ctx context.Context, ob *core.Outboxer, db Beginner, fn func(ctx context.Context, tx pgx.Tx, p *core.TxPublisher) error) error {
	if isNil(db) {
		return errNil("pgx handle")
	}
	_, nested := db.(pgx.Tx)
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("outboxer: begin: %w", err)
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	p := ob.NewTxPublisher(Executor(tx))
	if err := fn(ctx, tx, p); err != nil {
		return err
	}
	done = true
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("outboxer: commit: %w", err)
	}
	if !nested {
		p.Committed()
	}
	return nil
}

// Migrate creates the outbox tables through db in one transaction, with the DDL of
// core.MigrationSQL (PostgreSQL): the same tables as core.Migrate. The same DDL for the
// default table is in migrations/postgres as plain SQL files.
func Migrate(ctx context.Context, db Beginner, opts core.MigrateOptions) error {
	return migrate(ctx, db, opts, true)
}

// MigrateDown drops what Migrate created, with every message in it.
func MigrateDown(ctx context.Context, db Beginner, opts core.MigrateOptions) error {
	return migrate(ctx, db, opts, false)
}

func migrate(ctx context.Context, db Beginner, opts core.MigrateOptions, up bool) error {
	if isNil(db) {
		return fmt.Errorf("outboxer: migrate: %w", errNil("pgx handle"))
	}
	opts.Dialect = core.Postgres
	upSQL, downSQL, err := core.MigrationSQL(opts)
	if err != nil {
		return err
	}
	script := downSQL
	if up {
		script = upSQL
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("outboxer: migrate: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// One lock per table name, so concurrent migrations of the same table wait in turn.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "outboxer migrate "+opts.Schema+"."+opts.Table); err != nil {
		return fmt.Errorf("outboxer: migrate: %w", err)
	}
	for _, stmt := range strings.Split(script, ";\n") {
		if stmt = strings.TrimSpace(stmt); stmt == "" {
			continue
		}
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("outboxer: migrate: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("outboxer: migrate: %w", err)
	}
	return nil
}
