package adaptertest

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/outboxer-go/outboxer/adapters/adaptertest/drivercheck"
	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// Driver is a database/sql driver as a user opens it (directly, or through an ORM's
// own opener), checked by CheckDriver.
type Driver struct {
	// Name names the driver in test names ("pgdriver", "gorm-sqlite").
	Name string
	// Dialect is the database the driver speaks to.
	Dialect core.Dialect
	// Open returns a handle through the driver on the database db (which dbtest opened
	// with its own driver). Close it with t.Cleanup.
	Open func(t testing.TB, db *dbtest.DB) *sql.DB
}

// CheckDriver runs drivercheck.Check on a fresh database of d's dialect, opened
// through d.
func CheckDriver(t *testing.T, d Driver) {
	t.Parallel()
	db := dbtest.Open(t, d.Dialect)
	drivercheck.Check(t, d.Open(t, db), d.Dialect)
}

// MattnSQLiteDSN is the DSN for github.com/mattn/go-sqlite3 (and GORM's SQLite driver)
// on the SQLite file of db, with the settings of dbtest.SQLiteDSN in mattn's spelling.
func MattnSQLiteDSN(db *dbtest.DB) string {
	path := strings.TrimPrefix(db.DSN, "file:")
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	return "file:" + path + "?_busy_timeout=10000&_journal_mode=WAL&_synchronous=NORMAL&_txlock=immediate"
}
