package bunoutbox_test

import (
	"database/sql"
	"testing"

	"github.com/uptrace/bun/driver/pgdriver"
	"github.com/uptrace/bun/driver/sqliteshim"

	"github.com/outboxer-go/outboxer/adapters/adaptertest"
	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// openPgdriver opens the PostgreSQL test database through bun's own driver, as bun's
// documentation does: sql.OpenDB(pgdriver.NewConnector(...)).
func openPgdriver(t testing.TB, db *dbtest.DB) *sql.DB {
	h := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(db.DSN)))
	t.Cleanup(func() { h.Close() })
	return h
}

// openShim opens the SQLite test file through bun's sqliteshim, which registers
// modernc.org/sqlite where it runs and mattn/go-sqlite3 elsewhere.
func openShim(t testing.TB, db *dbtest.DB) *sql.DB {
	dsn := db.DSN
	if sqliteshim.DriverName() == "sqlite3" {
		dsn = adaptertest.MattnSQLiteDSN(db)
	}
	h, err := sql.Open(sqliteshim.ShimName, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func openMySQL(t testing.TB, db *dbtest.DB) *sql.DB {
	h, err := sql.Open("mysql", db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// TestDrivers runs Outboxer on the drivers bun's documentation sets up, with no
// Dialect set, and checks that their errors are read right.
func TestDrivers(t *testing.T) {
	for _, d := range []adaptertest.Driver{
		{Name: "pgdriver", Dialect: core.Postgres, Open: openPgdriver},
		{Name: "sqliteshim", Dialect: core.SQLite, Open: openShim},
		{Name: "mysql", Dialect: core.MySQL, Open: openMySQL},
	} {
		t.Run(d.Name, func(t *testing.T) { adaptertest.CheckDriver(t, d) })
	}
}

// TestConformancePgdriver runs the adapter suite with every handle, the instance's
// and bun's, on bun's pgdriver.
func TestConformancePgdriver(t *testing.T) {
	a := adapter
	a.Dialects = []core.Dialect{core.Postgres}
	a.Reopen = func(t testing.TB, db *dbtest.DB) *dbtest.DB {
		re := *db
		re.DB = openPgdriver(t, db)
		re.Driver = "pg"
		return &re
	}
	adaptertest.Run(t, a)
}
