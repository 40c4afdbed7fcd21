package sqlxoutbox_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/outboxer-go/outboxer/adapters/adaptertest"
	sqlxoutbox "github.com/outboxer-go/outboxer/adapters/sqlx"
	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

var update = flag.Bool("update", false, "rewrite the SQL files in migrations/ from core.MigrationSQL")

// TestMigrationFilesMatchCore keeps the committed SQL files equal to the core's DDL.
// Run `go test -run TestMigrationFilesMatchCore -update` after the core's DDL changed.
func TestMigrationFilesMatchCore(t *testing.T) {
	for _, d := range []core.Dialect{core.Postgres, core.MySQL, core.SQLite} {
		up, down, err := core.MigrationSQL(core.MigrateOptions{Dialect: d})
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]string{"000001_outboxer.up.sql": up, "000001_outboxer.down.sql": down} {
			path := filepath.Join("..", "migrations", string(d), name)
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			got, err := sqlxoutbox.Migrations.ReadFile("migrations/" + string(d) + "/" + name)
			if err != nil {
				t.Fatalf("%s: %v (run go test -update)", path, err)
			}
			if string(got) != want {
				t.Errorf("%s differs from core.MigrationSQL: run go test -run TestMigrationFilesMatchCore -update", path)
			}
		}
	}
}

// TestMigrationFilesCreateCoreTables runs the committed files through sqlx and compares
// the result with core.Migrate's.
func TestMigrationFilesCreateCoreTables(t *testing.T) {
	run := func(ctx context.Context, db *dbtest.DB, name string) error {
		script, err := sqlxoutbox.Migrations.ReadFile("migrations/" + string(db.Dialect) + "/" + name)
		if err != nil {
			return err
		}
		x := sqlx.NewDb(db.DB, db.Driver)
		for _, stmt := range adaptertest.SplitScript(string(script)) {
			if _, err := x.ExecContext(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	}
	adaptertest.CheckMigration(t, dbtest.Dialects,
		func(ctx context.Context, db *dbtest.DB) error { return run(ctx, db, "000001_outboxer.up.sql") },
		func(ctx context.Context, db *dbtest.DB) error { return run(ctx, db, "000001_outboxer.down.sql") })
}

func TestMigrate(t *testing.T) {
	adaptertest.CheckMigration(t, dbtest.Dialects,
		func(ctx context.Context, db *dbtest.DB) error {
			return sqlxoutbox.Migrate(ctx, sqlx.NewDb(db.DB, db.Driver), core.MigrateOptions{Dialect: db.Dialect})
		},
		func(ctx context.Context, db *dbtest.DB) error {
			return sqlxoutbox.MigrateDown(ctx, sqlx.NewDb(db.DB, db.Driver), core.MigrateOptions{Dialect: db.Dialect})
		})
}
