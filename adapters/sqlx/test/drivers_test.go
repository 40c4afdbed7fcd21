package sqlxoutbox_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strings"
	"testing"

	_ "github.com/lib/pq"           // the "postgres" driver
	_ "github.com/mattn/go-sqlite3" // the "sqlite3" driver

	"github.com/outboxer-go/outboxer/adapters/adaptertest"
	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// opener opens the test database's DSN (or the one dsn makes of it) with the driver
// registered as name.
func opener(name string, dsn func(*dbtest.DB) string) func(t testing.TB, db *dbtest.DB) *sql.DB {
	return func(t testing.TB, db *dbtest.DB) *sql.DB {
		d := db.DSN
		if dsn != nil {
			d = dsn(db)
		}
		h, err := sql.Open(name, d)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		return h
	}
}

// TestDrivers runs Outboxer, with no Dialect set, on the drivers sqlx users open
// (pgx's stdlib, lib/pq, go-sql-driver/mysql, modernc.org/sqlite, mattn/go-sqlite3),
// and checks that their errors are read right.
func TestDrivers(t *testing.T) {
	for _, d := range []adaptertest.Driver{
		{Name: "pgx", Dialect: core.Postgres, Open: opener("pgx", nil)},
		{Name: "pq", Dialect: core.Postgres, Open: opener("postgres", nil)},
		{Name: "mysql", Dialect: core.MySQL, Open: opener("mysql", nil)},
		{Name: "modernc", Dialect: core.SQLite, Open: opener("sqlite", nil)},
		{Name: "mattn", Dialect: core.SQLite, Open: opener("sqlite3", adaptertest.MattnSQLiteDSN)},
	} {
		t.Run(d.Name, func(t *testing.T) { adaptertest.CheckDriver(t, d) })
	}
}

// tracing is a driver wrapping another, as tracing and metrics wrappers do.
type tracing struct{ inner driver.Driver }

func (w tracing) Open(name string) (driver.Conn, error) { return w.inner.Open(name) }

// connector is a wrapper's connector, holding the wrapped driver's connector.
type connector struct{ inner driver.Connector }

func (c connector) Connect(ctx context.Context) (driver.Conn, error) { return c.inner.Connect(ctx) }
func (c connector) Driver() driver.Driver                            { return tracingConnector{c} }

type tracingConnector struct{ c connector }

func (w tracingConnector) Open(string) (driver.Conn, error) { return w.c.Connect(context.Background()) }

// TestDetectDialectThroughWrapper checks that a driver wrapping another one, in a
// field, is taken for the one it wraps; and that a driver Outboxer does not know is
// refused with the error that says to set Config.Dialect.
func TestDetectDialectThroughWrapper(t *testing.T) {
	t.Parallel()
	db := dbtest.MariaDB(t)
	for name, h := range map[string]*sql.DB{
		"driver":    sql.OpenDB(driverConnector{tracing{db.DB.Driver()}, db.DSN}),
		"connector": sql.OpenDB(connector{mustConnector(t, db)}),
	} {
		t.Cleanup(func() { h.Close() })
		if d, err := core.DetectDialect(h); err != nil || d != core.MySQL {
			t.Errorf("%s: DetectDialect: %q, %v; want mysql", name, d, err)
		}
	}
	unknown := sql.OpenDB(driverConnector{tracing{}, ""})
	t.Cleanup(func() { unknown.Close() })
	_, err := core.DetectDialect(unknown)
	if err == nil || !strings.Contains(err.Error(), "cannot tell the dialect of driver") || !strings.Contains(err.Error(), "set Config.Dialect") {
		t.Fatalf("DetectDialect of an unknown driver: %v, want the error naming Config.Dialect", err)
	}
	if _, err := core.New(core.Config{DB: unknown, Outboxes: map[string]core.OutboxConfig{"orders": {}}}); err == nil || !strings.Contains(err.Error(), "Dialect") {
		t.Fatalf("core.New on an unknown driver: %v, want a refusal naming Dialect", err)
	}
}

// driverConnector opens dsn through d.
type driverConnector struct {
	d   driver.Driver
	dsn string
}

func (c driverConnector) Connect(context.Context) (driver.Conn, error) { return c.d.Open(c.dsn) }
func (c driverConnector) Driver() driver.Driver                        { return c.d }

func mustConnector(t testing.TB, db *dbtest.DB) driver.Connector {
	t.Helper()
	dc, ok := db.DB.Driver().(driver.DriverContext)
	if !ok {
		t.Fatalf("%T is no driver.DriverContext", db.DB.Driver())
	}
	c, err := dc.OpenConnector(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
