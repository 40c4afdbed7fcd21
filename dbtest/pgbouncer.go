package dbtest

import (
	"bytes"
	"context"
	"database/sql"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
)

// PgBouncerURL is the PgBouncer the pooler tests go through: transaction pooling in
// front of the PostgreSQL of PostgresURL (scripts/services.sh starts it).
func PgBouncerURL() string {
	if u := os.Getenv("OUTBOXER_TEST_PGBOUNCER"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:6432/test?sslmode=disable"
}

// PgBouncer returns a handle on a fresh PostgreSQL schema that goes through PgBouncer
// in transaction pooling mode, with pgx's default_query_exec_mode=exec (PgBouncer 1.18
// keeps no prepared statement between transactions). A session setting does not survive
// the pooler, so the handle has no search_path: give the engine Config.Schema =
// db.Schema. DSN is the pooler's; PostgresURL reaches the server directly. The test
// skips when PgBouncer is down, and fails in CI.
func PgBouncer(t testing.TB) *DB {
	t.Helper()
	return pgBouncer(t, "")
}

// PgBouncerOneServer is PgBouncer through a pool of one server connection (the database
// test_one of scripts/pgbouncer.ini): every client's statements run on the same server
// session, one transaction at a time.
func PgBouncerOneServer(t testing.TB) *DB {
	t.Helper()
	return pgBouncer(t, "test_one")
}

func pgBouncer(t testing.TB, database string) *DB {
	t.Helper()
	direct := Postgres(t) // the schema, dropped after the test
	u, err := url.Parse(PgBouncerURL())
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	if database != "" {
		u.Path = "/" + database
	}
	q := u.Query()
	q.Set("default_query_exec_mode", "exec")
	u.RawQuery = q.Encode()
	dsn := u.String()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		if !startPgBouncer(t, err) {
			unavailable(t, "PgBouncer", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := db.PingContext(ctx); err != nil {
			unavailable(t, "PgBouncer", err)
		}
	}
	return &DB{DB: db, Dialect: core.Postgres, DSN: dsn, Driver: "pgx", Schema: direct.Schema}
}

// startPgBouncer starts PgBouncer again with scripts/services.sh when the default one
// (PgBouncerURL without OUTBOXER_TEST_PGBOUNCER) does not answer, and reports whether it
// could. PgBouncer 1.18, Debian 12's, can exit on a cancel request that meets a server
// connection at the wrong moment ("server_proto: server in bad state: 11", PgBouncer issue
// 822, fixed in 1.20.1), and pgx sends one whenever a context ends during a statement, as
// when a test stops a relay: without this, one test's clean-up would fail every later
// test through the pooler.
func startPgBouncer(t testing.TB, cause error) bool {
	t.Helper()
	if os.Getenv("OUTBOXER_TEST_PGBOUNCER") != "" {
		return false
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return false
	}
	script := filepath.Join(filepath.Dir(file), "..", "scripts", "services.sh")
	if _, err := os.Stat(script); err != nil {
		return false
	}
	out, err := exec.Command(script).CombinedOutput()
	t.Logf("dbtest: PgBouncer did not answer (%v); %s: %s", cause, script, bytes.TrimSpace(out))
	return err == nil
}
