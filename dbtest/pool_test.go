package dbtest_test

import (
	"context"
	"database/sql"
	"log/slog"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// TestPoolThatClosesIdleConnectionsIsReported: a pool that keeps fewer idle connections
// than are used at once closes them as they come back, and statements wait for new ones
// (on PostgreSQL a graceful stop of 12 partitions took 0.5 s instead of 35 ms). Run warns,
// once, and says how many to keep; a pool that keeps enough is not warned about. The pool
// is database/sql's, the same for every database: SQLite shows it. The churn comes from
// the test's own statements on the same pool (8 connections held at once, every 20 ms), so
// that it is there whatever the workers' timing.
func TestPoolThatClosesIdleConnectionsIsReported(t *testing.T) {
	for _, tc := range []struct {
		name string
		idle int // SetMaxIdleConns and SetMaxOpenConns; 0 leaves database/sql's default (2 idle)
		warn bool
	}{{"default pool", 0, true}, {"enough idle", 16, false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := dbtest.SQLite(t)
			if tc.idle > 0 {
				db.SetMaxOpenConns(tc.idle)
				db.SetMaxIdleConns(tc.idle)
			}
			logs, logger := dbtest.NewLogs()
			ob := setup(t, db, core.Config{Name: "pooled", Logger: logger, Outboxes: map[string]core.OutboxConfig{"orders": {Relay: &recorder{}, Partitions: 4}}})
			run(t, ob)
			ctx := context.Background()
			held := make([]*sql.Conn, 8)
			burst := func() {
				for i := range held {
					c, err := db.Conn(ctx)
					if err != nil {
						t.Fatal(err)
					}
					held[i] = c
				}
				for _, c := range held {
					c.Close()
				}
			}
			warned := func() []dbtest.LogLine { return logs.Lines(slog.LevelWarn, "pool closes connections") }
			// Two checks of the pool (every 5 s) at least; the warning comes at the first.
			for end := time.Now().Add(12 * time.Second); time.Now().Before(end) || (tc.warn && len(warned()) == 0 && time.Now().Before(end.Add(time.Minute))); {
				burst()
				time.Sleep(20 * time.Millisecond)
			}
			got := warned()
			switch {
			case !tc.warn && len(got) != 0:
				t.Fatalf("warned about a pool that keeps %d idle: %v", tc.idle, got)
			case tc.warn && len(got) != 1:
				t.Fatalf("%d warnings about a pool that keeps 2 idle, want 1\n%s", len(got), logs)
			case tc.warn && (got[0].Attrs["suggested_max_idle"] != "8" || got[0].Attrs["workers"] != "4" || got[0].Attrs["outboxer"] != "pooled"):
				t.Fatalf("the warning says %v, want 4 workers and 8 idle suggested, for instance pooled", got[0].Attrs)
			}
		})
	}
}
