package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// TestDSNForms: the DSN forms users copy from their ORM's configuration are read as the
// database they name, never as a SQLite file path.
func TestDSNForms(t *testing.T) {
	for _, c := range []struct {
		dsn  string
		want core.Dialect
	}{
		{"postgres://u@db:5432/app", core.Postgres},
		{"postgresql://u@db:5432/app", core.Postgres},
		{"host=127.0.0.1 user=postgres dbname=test", core.Postgres},
		{"host=/var/run/postgresql dbname=test sslmode=disable", core.Postgres},
		{"dbname=test", core.Postgres},
		{"mysql://root@db:3306/app", core.MySQL},
		{"root:secret@tcp(127.0.0.1:3306)/app?parseTime=true", core.MySQL},
		{"app.db", core.SQLite},
		{"file:app.db?_pragma=foreign_keys(1)", core.SQLite},
		{"./data/app.db", core.SQLite},
	} {
		tg, err := parseDSN(c.dsn)
		if err != nil {
			t.Errorf("parseDSN(%q): %v", c.dsn, err)
			continue
		}
		if tg.dialect != c.want {
			t.Errorf("parseDSN(%q) = %s (%s), want %s", c.dsn, tg.dialect, tg.name, c.want)
		}
	}
	// A malformed keyword/value DSN names PostgreSQL and hides the password.
	_, err := parseDSN("host=127.0.0.1 port=notaport password=hunter2")
	if err == nil || !strings.Contains(err.Error(), "malformed PostgreSQL DSN") || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("malformed keyword/value DSN: %v", err)
	}
}

// keywordDSN turns the test's postgres:// URL into libpq's keyword/value form.
func keywordDSN(t *testing.T, db *dbtest.DB) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	kv := fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable search_path=%s", cfg.Host, cfg.Port, cfg.User, cfg.Database, db.Schema)
	if cfg.Password != "" {
		kv += " password=" + cfg.Password
	}
	return kv
}

// TestPostgresDSNFormsConnect: a keyword/value DSN and a postgresql:// URL reach the
// PostgreSQL database (before, the first was opened as a SQLite file that did not exist).
func TestPostgresDSNFormsConnect(t *testing.T) {
	db := dbtest.Postgres(t)
	s := seed(t, db)
	u, err := url.Parse(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	u.Scheme = "postgresql"
	for _, dsn := range []string{keywordDSN(t, db), u.String()} {
		c := decode[[]countsJSON](t, mustRun(t, "counts", "--dsn", dsn, "--outbox", "orders", "--json"))
		if len(c) != 1 || c[0].Pending != len64(s.orders) || c[0].Dead != len64(s.dead) {
			t.Fatalf("counts through %q: %+v", dsn, c)
		}
	}
}

func len64[T any](s []T) int64 { return int64(len(s)) }

// TestMissingSchemaHint: when the schema is the reason the table is missing, the error
// says so, instead of suggesting migrate up (which would create a second, empty outbox).
func TestMissingSchemaHint(t *testing.T) {
	db := dbtest.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	table := "hint_" + strings.TrimPrefix(db.Schema, "t_")
	if len(table) > core.MaxTableLen {
		table = table[:core.MaxTableLen]
	}
	if err := core.Migrate(ctx, db.DB, core.MigrateOptions{Table: table}); err != nil {
		t.Fatal(err)
	}
	// The DSN without the test's search_path: the table is in another schema.
	u, err := url.Parse(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Del("search_path")
	u.RawQuery = q.Encode()
	base := u.String()

	r := cli(t, "", "counts", "--dsn", base, "--table", table)
	wantFailure(t, r, exitRuntime, "it is not in the connection's search_path; a table "+table+" is in schema "+db.Schema+": pass --schema "+db.Schema)

	r = cli(t, "", "counts", "--dsn", base, "--table", table, "--schema", "no_such_schema_x")
	wantFailure(t, r, exitRuntime, "schema no_such_schema_x does not exist")
	if !strings.Contains(r.stderr, "pass --schema "+db.Schema) {
		t.Fatalf("the hint does not name the schema holding the table: %q", r.stderr)
	}

	// With the right schema it works.
	mustRun(t, "counts", "--dsn", base, "--table", table, "--schema", db.Schema)
}

// TestDiscardWithoutOutbox: retry and discard need no --outbox when the table holds one
// outbox, and name the outboxes when it holds several.
func TestDiscardWithoutOutbox(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		s := seed(t, db) // orders and emails
		r := cli(t, "", "discard", "--dsn", s.dsn, "--dead", "--yes")
		wantFailure(t, r, exitUsage, "name the outbox with --outbox")
		if !strings.Contains(r.stderr, "(emails, orders)") {
			t.Fatalf("the error does not name the outboxes: %q", r.stderr)
		}
		wantFailure(t, cli(t, "", "discard", "--dsn", s.dsn, "--dead", "--yes", "--outbox", "orders", "--outbox", "emails"),
			exitUsage, "name one --outbox, not 2")

		// Leave one outbox: emails goes away.
		mustRun(t, "discard", "--dsn", s.dsn, "--outbox", "emails", "--yes", fmt.Sprint(s.emails[0]))
		if _, err := db.ExecContext(context.Background(), `DELETE FROM outboxer_messages_leases WHERE outbox = 'emails'`); err != nil {
			t.Fatal(err)
		}
		res := decode[changeJSON](t, mustRun(t, "discard", "--dsn", s.dsn, "--dead", "--yes", "--json"))
		if res.Outbox != "orders" || res.Count != len64(s.dead) {
			t.Fatalf("discard --dead without --outbox: %+v, want the %d dead of orders", res, len(s.dead))
		}
		res = decode[changeJSON](t, mustRun(t, "retry", "--dsn", s.dsn, "--all", "--yes", "--json"))
		if res.Outbox != "orders" || res.Count != 0 {
			t.Fatalf("retry --all without --outbox: %+v", res)
		}
	})
}

// TestStatusFlagGrammar: the flags that need --check say so in English.
func TestStatusFlagGrammar(t *testing.T) {
	wantFailure(t, cli(t, "", "status", "--dsn", "x.db", "--max-age", "5m"), exitUsage, "--max-age applies only with --check")
	wantFailure(t, cli(t, "", "status", "--dsn", "x.db", "--max-age", "5m", "--max-dead", "1"), exitUsage,
		"--max-age, --max-dead apply only with --check")
}

// TestHelpTexts: the help a newcomer reads names the DSN forms and the optional --outbox.
func TestHelpTexts(t *testing.T) {
	r := mustRun(t, "--help")
	for _, want := range []string{"host=… user=… dbname=…", "postgresql://", "tcp(host:port)", "migrate", "discard", "relay"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("outboxer --help does not say %q:\n%s", want, r.stdout)
		}
	}
	r = mustRun(t, "discard", "--help")
	for _, want := range []string{"Usage: outboxer discard [flags] [ID...]\n\nDelete messages for good", "  --outbox name\n      the outbox (may be left out when the table holds only one)", "  --dead\n", "host="} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("outboxer discard --help does not say %q:\n%s", want, r.stdout)
		}
	}
	r = mustRun(t, "status", "--help")
	if !strings.Contains(r.stdout, "Usage: outboxer status [flags]\n") || strings.Contains(r.stdout, "\n  -max-age") {
		t.Errorf("outboxer status --help:\n%s", r.stdout)
	}
	// The default of --dsn comes from the environment: its password is never printed.
	cmd := exec.Command(binary, "status", "--help")
	cmd.Env = append(os.Environ(), "OUTBOXER_DSN=postgres://app:hunter2@db:5432/app")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), "hunter2") {
		t.Errorf("outboxer status --help with OUTBOXER_DSN set: %v\n%s", err, out)
	}
}
