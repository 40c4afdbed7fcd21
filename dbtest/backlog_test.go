package dbtest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// Ready messages flow past a large scheduled backlog (each message in its own group) and
// a poisoned group with a backlog of its own: the fetch reads only what can go now. The
// bound is generous: the fetch that excluded blocked groups took 12 s (PostgreSQL) to
// 143 s (SQLite) here.
func TestBacklogsDoNotSlowReadyMessages(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		rec := &recorder{}
		rec.Fail = func(batch []core.Envelope) error {
			for _, e := range batch {
				if e.GroupKey == "poison" {
					return &core.PartialFailure{Failed: map[int64]error{e.ID: errors.New("poison")}}
				}
			}
			return nil
		}
		ob := setup(t, db, core.Config{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: rec, BatchSize: 100, PollInterval: 20 * time.Millisecond,
			Backoff: core.Backoff{Func: func(int) time.Duration { return 50 * time.Millisecond }},
		}}})
		poisoned := make([]core.Message, 2000)
		for i := range poisoned {
			poisoned[i] = event{Seq: i, Group: "poison"}
		}
		publish(t, ob, db.DB, poisoned...)
		scheduled := make([]core.Message, 5000)
		for i := range scheduled {
			scheduled[i] = event{Seq: i, Group: fmt.Sprintf("later:%d", i)}
		}
		if _, err := ob.PublishAll(ctx, db.DB, scheduled, core.WithDelay(24*time.Hour)); err != nil {
			t.Fatal(err)
		}
		run(t, ob)
		// The poisoned group is tried, and its backlog held behind it.
		eventually(t, 30*time.Second, "the poisoned head tried twice", func() bool {
			l, err := ob.ListPending(ctx, "orders", 1)
			return err == nil && len(l) == 1 && l[0].Attempts >= 2
		})
		start := time.Now()
		var ready []core.Envelope
		for i := range 100 {
			ready = append(ready, publish(t, ob, db.DB, event{Seq: i, Group: fmt.Sprintf("now:%d", i)})...)
		}
		eventually(t, 10*time.Second, "the 100 ready messages delivered and confirmed", func() bool {
			return len(rec.delivered()) >= 100 && counts(t, ob, "orders").Pending == 7000
		})
		t.Logf("100 ready messages past the backlogs in %v", time.Since(start))
		got := rec.delivered()
		if len(got) != 100 {
			t.Fatalf("delivered %d, want the 100 ready ones only", len(got))
		}
		checkGroupOrder(t, ready, got)
	})
}
