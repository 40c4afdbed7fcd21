package dbtest_test

// Writers other than the engine on a SQLite table: the table's defaults are evaluated by
// the writer's SQLite, which may be older than the engine's.

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// A python3 program, whose sqlite3 module is older than SQLite 3.42 on Debian 12, inserts
// a message giving only outbox, type and payload: the defaults fill created_at and
// available_at with the clock (unixepoch('subsec') gave NULL there, and the insert
// failed), and the engine delivers the message.
func TestSQLiteWriterOnAnOlderSQLite(t *testing.T) {
	t.Parallel()
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("python3 (the foreign writer) is missing: %v", err)
		}
		t.Skipf("python3 (the foreign writer) is missing: %v", err)
	}
	ctx := context.Background()
	db := dbtest.SQLite(t)
	path, _, _ := strings.Cut(strings.TrimPrefix(db.DSN, "file:"), "?")
	rec := &recorder{}
	ob := setup(t, db, core.Config{Manual: true, Outboxes: map[string]core.OutboxConfig{"orders": {Relay: rec}}})

	before := time.Now()
	const prog = `import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("INSERT INTO ` + core.DefaultTable + ` (outbox, type, payload) VALUES ('orders', 'order.created', x'7b7d')")
c.commit()
print(sqlite3.sqlite_version)
`
	out, err := exec.CommandContext(ctx, py, "-c", prog, path).CombinedOutput()
	if err != nil {
		t.Fatalf("python3's insert: %v\n%s", err, out)
	}
	after := time.Now()
	t.Logf("the writer's SQLite: %s", strings.TrimSpace(string(out)))

	var created, available int64
	if err := db.QueryRowContext(ctx, `SELECT created_at, available_at FROM `+core.DefaultTable).Scan(&created, &available); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]int64{"created_at": created, "available_at": available} {
		at := time.UnixMicro(v)
		if at.Before(before.Add(-time.Second)) || at.After(after.Add(time.Second)) {
			t.Errorf("%s = %d (%v), want the clock at the insert, between %v and %v", name, v, at, before, after)
		}
	}
	res, err := ob.Drain(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	got := rec.delivered()
	if res.Delivered != 1 || len(got) != 1 || got[0].Type != "order.created" || string(got[0].Payload) != "{}" {
		t.Fatalf("Drain: %+v, delivered %+v; want the writer's message", res, got)
	}
}
