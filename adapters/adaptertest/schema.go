package adaptertest

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// Schema describes the outbox tables (outboxer_messages*) of db as the database itself
// reports them: columns, types, defaults and indexes. Two databases migrated the same way
// describe the same; "" means there are none.
func Schema(t testing.TB, db *dbtest.DB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var b strings.Builder
	collect := func(q string, args ...any) {
		rows, err := db.QueryContext(ctx, q, args...)
		if err != nil {
			t.Fatalf("describe schema: %v", err)
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]sql.NullString, len(cols))
			dest := make([]any, len(cols))
			for i := range vals {
				dest[i] = &vals[i]
			}
			if err := rows.Scan(dest...); err != nil {
				t.Fatalf("describe schema: %v", err)
			}
			for _, v := range vals {
				b.WriteString(v.String)
				b.WriteByte('|')
			}
			b.WriteByte('\n')
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("describe schema: %v", err)
		}
	}
	switch db.Dialect {
	case core.Postgres:
		collect(`SELECT table_name, column_name, data_type, is_nullable, column_default, is_identity
			FROM information_schema.columns WHERE table_schema = $1 AND table_name LIKE 'outboxer_messages%'
			ORDER BY table_name, ordinal_position`, db.Schema)
		collect(`SELECT tablename, indexname, replace(indexdef, $1, 'SCHEMA') FROM pg_indexes
			WHERE schemaname = $1 AND tablename LIKE 'outboxer_messages%' ORDER BY indexname`, db.Schema)
	case core.SQLite:
		collect(`SELECT type, name, sql FROM sqlite_master WHERE name LIKE 'outboxer_messages%' ORDER BY name`)
	case core.MySQL:
		var tables []string
		rows, err := db.QueryContext(ctx, `SHOW TABLES LIKE 'outboxer_messages%'`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				t.Fatal(err)
			}
			tables = append(tables, name)
		}
		rows.Close()
		for _, name := range tables {
			var n, ddl string
			if err := db.QueryRowContext(ctx, "SHOW CREATE TABLE `"+name+"`").Scan(&n, &ddl); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s\n", ddl)
		}
	}
	return b.String()
}

// CheckMigration runs migrate (the adapter's way of creating the outbox tables) on a fresh
// database of each dialect and fails unless the result is exactly what core.Migrate
// creates. When down is set, it must then remove every table again.
func CheckMigration(t *testing.T, dialects []core.Dialect, up, down func(ctx context.Context, db *dbtest.DB) error) {
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			ref := dbtest.Open(t, d)
			if err := core.Migrate(ctx, ref.DB, core.MigrateOptions{Dialect: d}); err != nil {
				t.Fatalf("core.Migrate: %v", err)
			}
			want := Schema(t, ref)
			if want == "" {
				t.Fatal("core.Migrate created no tables")
			}
			db := dbtest.Open(t, d)
			if err := up(ctx, db); err != nil {
				t.Fatalf("migrate up: %v", err)
			}
			if got := Schema(t, db); got != want {
				t.Fatalf("the adapter's migration differs from core.Migrate:\n got:\n%s\nwant:\n%s", got, want)
			}
			// And the engine works on it.
			e := Setup(t, db, nil)
			if _, err := e.Ob.Publish(ctx, db.DB, Event{OrderID: 1}); err != nil {
				t.Fatalf("publish on the migrated table: %v", err)
			}
			if res, err := e.Ob.Drain(ctx, "orders"); err != nil || res.Delivered != 1 {
				t.Fatalf("drain on the migrated table: %+v, %v", res, err)
			}
			if down == nil {
				return
			}
			if err := down(ctx, db); err != nil {
				t.Fatalf("migrate down: %v", err)
			}
			if got := Schema(t, db); got != "" {
				t.Fatalf("tables left after migrating down:\n%s", got)
			}
		})
	}
}

// SplitScript splits a script of core.MigrationSQL into its statements, for drivers that
// run one statement per call.
func SplitScript(script string) []string {
	var stmts []string
	for _, s := range strings.Split(script, ";\n") {
		if s = strings.TrimSpace(s); s != "" {
			stmts = append(stmts, s)
		}
	}
	return stmts
}
