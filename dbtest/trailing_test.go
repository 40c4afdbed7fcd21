package dbtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// Group keys that differ in trailing spaces are different groups on every database
// (MariaDB's utf8mb4_bin would pad them: 'a' = 'a ').
func TestGroupKeysDifferingInTrailingSpaces(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		rec := &recorder{}
		rec.Fail = func(batch []core.Envelope) error {
			for _, e := range batch {
				if e.GroupKey == "a" {
					return &core.PartialFailure{Failed: map[int64]error{e.ID: errors.New("poison")}}
				}
			}
			return nil
		}
		ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: rec, PollInterval: 10 * time.Millisecond,
			Backoff: core.Backoff{Func: func(int) time.Duration { return time.Hour }},
		}}})
		publish(t, ob, db.DB, event{Seq: 1, Group: "a"})
		run(t, ob)
		eventually(t, 30*time.Second, `group "a" blocked`, func() bool {
			l, err := ob.ListPending(ctx, "orders", 1)
			return err == nil && len(l) == 1 && l[0].Attempts == 1
		})
		want := publish(t, ob, db.DB, event{Seq: 2, Group: "a "}, event{Seq: 3, Group: "   "}, event{Seq: 4, Group: "   "})
		eventually(t, 30*time.Second, `groups "a " and "   " delivered`, func() bool {
			return len(rec.delivered()) == 3 && counts(t, ob, "orders").Pending == 1
		})
		got := rec.delivered()
		for i := range want {
			if got[i].ID != want[i].ID || got[i].GroupKey != want[i].GroupKey {
				t.Errorf("delivery %d: %d %q, want %d %q", i, got[i].ID, got[i].GroupKey, want[i].ID, want[i].GroupKey)
			}
		}
	})
}
