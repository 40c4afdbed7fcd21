package main

import (
	"context"
	"fmt"

	"github.com/outboxer-go/outboxer/core"
)

func runMigrate(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "migrate")
	printSQL := fs.Bool("print-sql", false, "print the SQL instead of running it (for goose, golang-migrate, Atlas, or a review)")
	dialect := fs.String("dialect", "", "with --print-sql and no --dsn: postgres, mysql or sqlite")
	yes := fs.Bool("yes", false, "migrate down without asking for confirmation")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	up := true
	switch {
	case len(pos) == 0, len(pos) == 1 && pos[0] == "up":
	case len(pos) == 1 && pos[0] == "down":
		up = false
	default:
		return usagef("want migrate up or migrate down, got %q", pos)
	}
	if err := checkNames(fs.table, fs.schema, ""); err != nil {
		return err
	}
	opts := core.MigrateOptions{Table: fs.table, Schema: fs.schema}
	if *printSQL {
		switch {
		case *dialect != "":
			opts.Dialect = core.Dialect(*dialect)
			if opts.Dialect != core.Postgres && opts.Dialect != core.MySQL && opts.Dialect != core.SQLite {
				return usagef("--dialect %q is not one of postgres, mysql, sqlite", *dialect)
			}
		case fs.dsn != "":
			t, err := parseDSN(fs.dsn)
			if err != nil {
				return err
			}
			opts.Dialect = t.dialect
		default:
			return usagef("--print-sql needs --dialect or --dsn")
		}
		if err := checkNames(fs.table, fs.schema, opts.Dialect); err != nil {
			return err
		}
		upSQL, downSQL, err := core.MigrationSQL(opts)
		if err != nil {
			return usagef("%v", err)
		}
		if up {
			_, err = fmt.Fprint(e.stdout, upSQL)
		} else {
			_, err = fmt.Fprint(e.stdout, downSQL)
		}
		return err
	}
	t, err := parseDSN(fs.dsn)
	if err != nil {
		return err
	}
	if err := checkNames(fs.table, fs.schema, t.dialect); err != nil {
		return err
	}
	ctx, cancel := fs.context(ctx)
	defer cancel()
	db, t, err := open(ctx, fs.dsn, up)
	if err != nil {
		return err
	}
	defer db.Close()
	opts.Dialect = t.dialect
	name := fs.table
	if fs.schema != "" {
		name = fs.schema + "." + fs.table
	}
	if up {
		if err := core.Migrate(ctx, db, opts); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "migrated up: tables %s and %s_leases are in the %s\n", name, name, t.name)
		return nil
	}
	if err := confirm(e, *yes, fmt.Sprintf("Drop tables %s and %s_leases, with every message in them, from the %s?", name, name, t.name)); err != nil {
		return err
	}
	if err := core.MigrateDown(ctx, db, opts); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "migrated down: dropped tables %s and %s_leases from the %s\n", name, name, t.name)
	return nil
}
