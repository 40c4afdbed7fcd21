package dbtest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// TestMigrationLeavesNewMessagesReady: the migration's upgrade statement turns ready rows
// of earlier versions that are not due yet into waiting rows. It runs in a transaction
// (Migrate's on PostgreSQL, and a migration tool's), which may have begun, and waited
// for Migrate's lock, before a service published and committed a message. Compared with
// the transaction's clock (PostgreSQL's now()), that message looked not yet due: it was
// made waiting while a relay had it in flight, the relay's confirmation missed it, and
// it was delivered again (seen as duplicates when a node ran Migrate under load). It must
// stay ready.
func TestMigrationLeavesNewMessagesReady(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {Relay: &recorder{}}}})
		up, _, err := core.MigrationSQL(core.MigrateOptions{Dialect: db.Dialect})
		if err != nil {
			t.Fatal(err)
		}
		var upgrade string
		for _, st := range strings.Split(up, ";\n\n") {
			if strings.HasPrefix(strings.TrimSpace(st), "UPDATE") {
				upgrade = st
			}
		}
		if upgrade == "" {
			t.Fatalf("no upgrade statement in the migration:\n%s", up)
		}
		migration, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer migration.Rollback()
		if db.Dialect != core.SQLite { // SQLite has one writer: the publish would wait for the migration
			if _, err := migration.ExecContext(ctx, `SELECT 1`); err != nil { // the transaction has begun
				t.Fatal(err)
			}
			publish(t, ob, db.DB, event{Seq: 1})
		}
		if _, err := migration.ExecContext(ctx, upgrade); err != nil {
			t.Fatal(err)
		}
		if err := migration.Commit(); err != nil {
			t.Fatal(err)
		}
		if db.Dialect == core.SQLite {
			publish(t, ob, db.DB, event{Seq: 1})
		}
		var waiting int
		if err := db.QueryRow(`SELECT count(*) FROM outboxer_messages WHERE state = 3`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting != 0 {
			t.Fatalf("%d message(s) published during the migration were made waiting; they are due now", waiting)
		}
	})
}
