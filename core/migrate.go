package core

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"

	"github.com/outboxer-go/outboxer/core/internal/dialect"
)

// MigrateOptions names the tables Migrate creates. Give one per table when outboxes have
// tables of their own.
type MigrateOptions struct {
	// Dialect of the database; detected from the driver when empty (Migrate) and required
	// by MigrationSQL.
	Dialect Dialect
	// Table is the message table; "outboxer_messages" when empty. Migrate also creates
	// Table+"_leases" (partition owners), Table+"_nodes" (running relay nodes) and, on MySQL, Table+"_locks" (SerializeWrites).
	Table string
	// Schema (PostgreSQL) holds the tables; created if missing. The search path when empty.
	Schema string
}

func (m MigrateOptions) statements() (*dialect.SQL, error) {
	table := orDefault(m.Table, DefaultTable)
	if !validTable(table) {
		return nil, &ConfigError{Field: "Table", Reason: tableReason(table)}
	}
	switch m.Dialect {
	case Postgres, SQLite, MySQL:
	default:
		return nil, &ConfigError{Field: "Dialect", Reason: fmt.Sprintf("%q is not one of postgres, sqlite, mysql", m.Dialect)}
	}
	if m.Schema != "" {
		if m.Dialect != Postgres {
			return nil, &ConfigError{Field: "Schema", Reason: "is for PostgreSQL only"}
		}
		if !validIdent(m.Schema) {
			return nil, &ConfigError{Field: "Schema", Reason: fmt.Sprintf("%q is not a valid name (letters, digits, _; at most 63)", m.Schema)}
		}
	}
	return dialect.New(dialectKind(m.Dialect), m.Schema, table), nil
}

// MigrationSQL returns the DDL that Migrate and MigrateDown run, as SQL text for goose,
// golang-migrate, Atlas or a hand-run script. opts.Dialect is required.
func MigrationSQL(opts MigrateOptions) (up, down string, err error) {
	s, err := opts.statements()
	if err != nil {
		return "", "", err
	}
	return dialect.Script(s.Up()), dialect.Script(s.Down()), nil
}

// Migrate creates the outbox tables and indexes if they do not exist. It is idempotent
// and safe to run from several processes at once on PostgreSQL (it takes an advisory
// lock). On SQLite it also switches the file to WAL.
func Migrate(ctx context.Context, db *sql.DB, opts MigrateOptions) error {
	return migrate(ctx, db, opts, true)
}

// MigrateDown drops what Migrate created, with every message in it.
func MigrateDown(ctx context.Context, db *sql.DB, opts MigrateOptions) error {
	return migrate(ctx, db, opts, false)
}

func migrate(ctx context.Context, db *sql.DB, opts MigrateOptions, up bool) error {
	if db == nil {
		return fmt.Errorf("%w: nil *sql.DB", ErrInvalidExecutor)
	}
	if opts.Dialect == "" {
		d, err := DetectDialect(db)
		if err != nil {
			return fmt.Errorf("outboxer: migrate: %w", err)
		}
		opts.Dialect = d
	}
	s, err := opts.statements()
	if err != nil {
		return err
	}
	stmts := s.Down()
	if up {
		stmts = s.Up()
	}
	if opts.Dialect == SQLite && up {
		if _, err := db.ExecContext(ctx, `PRAGMA journal_mode=WAL`); err != nil {
			return fmt.Errorf("outboxer: migrate: %w", err)
		}
	}
	if opts.Dialect != Postgres {
		// MySQL's DDL is not transactional and SQLite's statements are idempotent as they are.
		for _, st := range stmts {
			if _, err := db.ExecContext(ctx, st); err != nil {
				return fmt.Errorf("outboxer: migrate %s: %w", s.Messages, err)
			}
		}
		return nil
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("outboxer: migrate: %w", err)
	}
	defer tx.Rollback()
	h := fnv.New64a()
	h.Write([]byte("outboxer migrate " + s.Messages))
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(h.Sum64())); err != nil {
		return fmt.Errorf("outboxer: migrate: %w", err)
	}
	for _, st := range stmts {
		if _, err := tx.ExecContext(ctx, st); err != nil {
			return fmt.Errorf("outboxer: migrate %s: %w", s.Messages, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outboxer: migrate: %w", err)
	}
	return nil
}

// Migrate runs Migrate for every table of the instance, in its dialect and schema.
func (o *Outboxer) Migrate(ctx context.Context) error {
	for _, s := range o.tables {
		if err := Migrate(ctx, o.cfg.DB, MigrateOptions{Dialect: o.cfg.Dialect, Table: s.Table, Schema: s.Schema}); err != nil {
			return err
		}
	}
	return nil
}
