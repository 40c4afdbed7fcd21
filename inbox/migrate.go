package inbox

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/outboxer-go/outboxer/core"
)

// MigrateOptions names the inbox's tables.
type MigrateOptions struct {
	// Dialect of the database; detected from the driver when empty (Migrate) and required
	// by MigrationSQL.
	Dialect core.Dialect
	// Table is the records' table, DefaultTable when empty; Migrate also creates
	// Table+"_groups" (the stale check's marks).
	Table string
	// Schema (PostgreSQL) holds the tables; created if missing. The search path when empty.
	Schema string
}

func (m MigrateOptions) statements() (*statements, error) {
	if m.Table == "" {
		m.Table = DefaultTable
	}
	if err := validate(m.Dialect, m.Schema, m.Table); err != nil {
		return nil, err
	}
	return newStatements(m.Dialect, m.Schema, m.Table), nil
}

// MigrationSQL returns the DDL Migrate and MigrateDown run, as SQL text for goose,
// golang-migrate, Atlas or a hand-run script. opts.Dialect is required.
func MigrationSQL(opts MigrateOptions) (up, down string, err error) {
	s, err := opts.statements()
	if err != nil {
		return "", "", err
	}
	return script(s.up), script(s.down), nil
}

// Migrate creates the inbox's tables and indexes if they do not exist. It is idempotent.
func Migrate(ctx context.Context, db *sql.DB, opts MigrateOptions) error {
	return migrate(ctx, db, opts, true)
}

// MigrateDown drops what Migrate created, with every record in it.
func MigrateDown(ctx context.Context, db *sql.DB, opts MigrateOptions) error {
	return migrate(ctx, db, opts, false)
}

func migrate(ctx context.Context, db *sql.DB, opts MigrateOptions, up bool) error {
	if db == nil {
		return fmt.Errorf("%w: nil *sql.DB", core.ErrInvalidExecutor)
	}
	if opts.Dialect == "" {
		d, err := core.DetectDialect(db)
		if err != nil {
			return fmt.Errorf("inbox: migrate: %w", err)
		}
		opts.Dialect = d
	}
	s, err := opts.statements()
	if err != nil {
		return err
	}
	stmts := s.down
	if up {
		stmts = s.up
	}
	for _, st := range stmts {
		if _, err := db.ExecContext(ctx, st); err != nil {
			return fmt.Errorf("inbox: migrate %s: %w", s.records, err)
		}
	}
	return nil
}

// Migrate creates the inbox's tables in its dialect and schema.
func (in *Inbox) Migrate(ctx context.Context) error {
	return Migrate(ctx, in.cfg.DB, MigrateOptions{Dialect: in.cfg.Dialect, Table: in.cfg.Table, Schema: in.cfg.Schema})
}
