package dbtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
	_ "modernc.org/sqlite"             // the "sqlite" driver

	"github.com/outboxer-go/outboxer/core"
)

// DB is an isolated database for one test.
type DB struct {
	*sql.DB
	Dialect core.Dialect
	// DSN opens another handle on the same database (another process, say).
	DSN string
	// Driver is the database/sql driver name for DSN.
	Driver string
	// Schema is the PostgreSQL schema of the test ("" elsewhere); the DSN's search_path.
	Schema string
}

// Dialects lists the dialects every storage test runs on.
var Dialects = []core.Dialect{core.Postgres, core.MySQL, core.SQLite}

// Open returns an isolated database of the dialect for t.
func Open(t testing.TB, d core.Dialect) *DB {
	t.Helper()
	switch d {
	case core.Postgres:
		return Postgres(t)
	case core.MySQL:
		return MariaDB(t)
	case core.SQLite:
		return SQLite(t)
	}
	t.Fatalf("dbtest: unknown dialect %q", d)
	return nil
}

// ForEach runs f as a subtest on each dialect, each with its own database.
func ForEach(t *testing.T, f func(t *testing.T, db *DB)) {
	for _, d := range Dialects {
		t.Run(string(d), func(t *testing.T) { f(t, Open(t, d)) })
	}
}

func unavailable(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("dbtest: %s is unavailable in CI: %v", what, err)
	}
	t.Skipf("dbtest: %s is unavailable: %v", what, err)
}

func randomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// PostgresURL is the server the PostgreSQL tests use.
func PostgresURL() string {
	if u := os.Getenv("OUTBOXER_TEST_POSTGRES"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// Postgres returns a handle whose search_path is a fresh schema, dropped after the test.
func Postgres(t testing.TB) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := sql.Open("pgx", PostgresURL())
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() { admin.Close() })
	if err := admin.PingContext(ctx); err != nil {
		unavailable(t, "PostgreSQL", err)
	}
	schema := randomName("t_")
	if _, err := admin.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatalf("dbtest: create schema: %v", err)
	}
	u, err := url.Parse(PostgresURL())
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	dsn := u.String()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() {
		db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, `DROP SCHEMA `+schema+` CASCADE`); err != nil {
			t.Logf("dbtest: drop schema %s: %v", schema, err)
		}
	})
	return &DB{DB: db, Dialect: core.Postgres, DSN: dsn, Driver: "pgx", Schema: schema}
}

// MariaDBDSN is the server the MariaDB tests use, without a database name.
func MariaDBDSN() string {
	if d := os.Getenv("OUTBOXER_TEST_MARIADB"); d != "" {
		return d
	}
	return "root@tcp(127.0.0.1:3306)/"
}

// MariaDB returns a handle on a fresh database, dropped after the test.
func MariaDB(t testing.TB) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := sql.Open("mysql", MariaDBDSN())
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() { admin.Close() })
	if err := admin.PingContext(ctx); err != nil {
		unavailable(t, "MariaDB", err)
	}
	name := randomName("t_")
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("dbtest: create database: %v", err)
	}
	cfg, err := mysql.ParseDSN(MariaDBDSN())
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	cfg.DBName = name
	dsn := cfg.FormatDSN()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() {
		db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE "+name); err != nil {
			t.Logf("dbtest: drop database %s: %v", name, err)
		}
	})
	return &DB{DB: db, Dialect: core.MySQL, DSN: dsn, Driver: "mysql"}
}

// Interpolating returns another handle on db, a MariaDB database, whose driver writes
// the arguments into each statement instead of preparing it (interpolateParams=true).
// It is closed when the test ends.
func (db *DB) Interpolating(t testing.TB) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(db.DSN)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	cfg.InterpolateParams = true
	h, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// SQLiteDSN is the DSN the project recommends for a SQLite file: WAL, a busy timeout, and
// immediate transactions.
func SQLiteDSN(path string) string {
	return "file:" + filepath.ToSlash(path) + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"
}

// SQLite returns a handle on a fresh file in the test's temporary directory.
func SQLite(t testing.TB) *DB {
	t.Helper()
	dsn := SQLiteDSN(filepath.Join(t.TempDir(), strings.ReplaceAll(t.Name(), "/", "_")+".db"))
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return &DB{DB: db, Dialect: core.SQLite, DSN: dsn, Driver: "sqlite"}
}

// String names the database for messages.
func (db *DB) String() string { return fmt.Sprintf("%s database", db.Dialect) }
