package gormoutbox_test

import (
	"database/sql"
	"testing"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/outboxer-go/outboxer/adapters/adaptertest"
	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// gormOpen opens the test database the way GORM's documentation does, through the
// dialector's own driver, and returns GORM's *sql.DB.
func gormOpen(d func(db *dbtest.DB) gorm.Dialector) func(t testing.TB, db *dbtest.DB) *sql.DB {
	return func(t testing.TB, db *dbtest.DB) *sql.DB {
		g, err := gorm.Open(d(db), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			t.Fatalf("gorm.Open: %v", err)
		}
		h, err := g.DB()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		return h
	}
}

// TestDrivers runs Outboxer, with no Dialect set, on the *sql.DB of GORM opened with
// each of its drivers, and checks that their errors are read right: gorm.io/driver/postgres
// (pgx's stdlib), gorm.io/driver/mysql and gorm.io/driver/sqlite (mattn/go-sqlite3).
// github.com/glebarez/sqlite is checked in ./glebarez: its driver registers the name
// "sqlite", as modernc.org/sqlite (which dbtest uses) does, so the two cannot be linked
// into one test binary.
func TestDrivers(t *testing.T) {
	for _, d := range []adaptertest.Driver{
		{Name: "gorm-postgres", Dialect: core.Postgres, Open: gormOpen(func(db *dbtest.DB) gorm.Dialector { return postgres.Open(db.DSN) })},
		{Name: "gorm-mysql", Dialect: core.MySQL, Open: gormOpen(func(db *dbtest.DB) gorm.Dialector { return mysql.Open(db.DSN) })},
		{Name: "gorm-sqlite", Dialect: core.SQLite, Open: gormOpen(func(db *dbtest.DB) gorm.Dialector { return sqlite.Open(adaptertest.MattnSQLiteDSN(db)) })},
	} {
		t.Run(d.Name, func(t *testing.T) { adaptertest.CheckDriver(t, d) })
	}
}
