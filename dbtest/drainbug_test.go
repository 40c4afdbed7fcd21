package dbtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// A failed message blocks its group for the rest of a Drain even when its backoff is
// already over: the exclusion is kept by the query itself, on every dialect.
func TestDrainDoesNotRetryWithinOneCall(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		calls := 0
		var poison int64
		relay := core.RelayFunc(func(ctx context.Context, batch []core.Envelope) error {
			calls++
			for _, e := range batch {
				if e.ID == poison {
					return &core.PartialFailure{Failed: map[int64]error{e.ID: errors.New("poison")}}
				}
			}
			return nil
		})
		ob := setup(t, db, core.Config{Manual: true, Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: relay, Partitions: 2, Backoff: core.Backoff{Func: func(int) time.Duration { return 0 }},
		}}})
		envs := publish(t, ob, db.DB, event{Seq: 1, Group: "a"}, event{Seq: 2, Group: "a"}, event{Seq: 3, Group: "b"},
			event{Seq: 4, Group: "c"}, event{Seq: 5, Group: "c"}, event{Seq: 6})
		poison = envs[3].ID
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := ob.Drain(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		if res != (core.DrainResult{Delivered: 4, Failed: 1}) {
			t.Errorf("Drain = %+v after %d deliveries, want 4 delivered and the poison failed once", res, calls)
		}
		pending, _ := ob.ListPending(ctx, "orders", 10)
		if len(pending) != 2 || pending[0].ID != poison || pending[0].Attempts != 1 || pending[1].ID != envs[4].ID {
			t.Errorf("pending = %+v, want the poison (one attempt) and the message behind it", pending)
		}
	})
}
