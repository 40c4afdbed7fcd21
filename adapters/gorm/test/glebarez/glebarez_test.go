// Package glebarez_test checks Outboxer on github.com/glebarez/sqlite, GORM's SQLite
// dialector without cgo. Its driver (github.com/glebarez/go-sqlite, on modernc's
// SQLite) registers the name "sqlite", which modernc.org/sqlite registers too: this
// test binary links neither modernc's driver nor dbtest, and uses a file of its own.
package glebarez_test

import (
	"path/filepath"
	"testing"

	glebarez "github.com/glebarez/sqlite"
	"go.uber.org/goleak"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/outboxer-go/outboxer/adapters/adaptertest/drivercheck"
	"github.com/outboxer-go/outboxer/core"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDriver runs Outboxer, with no Dialect set, on GORM's *sql.DB opened with
// glebarez's dialector, and checks that its errors are read right.
func TestDriver(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "glebarez.db")
	dsn := "file:" + filepath.ToSlash(path) + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	g, err := gorm.Open(glebarez.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatalf("gorm.Open: %v", err)
	}
	h, err := g.DB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	drivercheck.Check(t, h, core.SQLite)
}
