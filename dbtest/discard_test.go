package dbtest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// A poison discarded while the relay has it in hand (its retry was due, so it is ready
// again, no longer waiting) releases the messages of its group held behind it. The relay
// holds the poison's second delivery until Discard has returned, so the interleaving is
// the same on every run: the held message A3 must still arrive.
func TestDiscardWhileThePoisonIsInFlight(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		var (
			mu        sync.Mutex
			poisonID  int64 = -1
			delivered []int64
		)
		inFlight := make(chan struct{})  // the poison's retry is in the relay's hands
		discarded := make(chan struct{}) // Discard returned
		var once sync.Once
		relay := core.RelayFunc(func(ctx context.Context, batch []core.Envelope) error {
			mu.Lock()
			bad := poisonID
			mu.Unlock()
			for i, e := range batch {
				if e.ID != bad {
					continue
				}
				// What goes before the poison is delivered; what follows, of its group, not.
				mu.Lock()
				for _, d := range batch[:i] {
					delivered = append(delivered, d.ID)
				}
				mu.Unlock()
				// The retry, alone: A3 is held behind the poison, not in this batch.
				if e.Attempts >= 1 && len(batch) == 1 {
					once.Do(func() {
						close(inFlight)
						select {
						case <-discarded:
						case <-time.After(30 * time.Second):
						}
					})
				}
				return &core.PartialFailure{Failed: map[int64]error{e.ID: errors.New("poison")}}
			}
			mu.Lock()
			for _, e := range batch {
				delivered = append(delivered, e.ID)
			}
			mu.Unlock()
			return nil
		})
		ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: relay, PollInterval: 10 * time.Millisecond,
			// Long enough that A3 is read (and held) behind the waiting poison before the
			// poison is due again.
			Backoff: core.Backoff{Func: func(int) time.Duration { return 300 * time.Millisecond }},
		}}})
		a := publish(t, ob, db.DB, event{Group: "A", Seq: 1}, event{Group: "A", Seq: 2}, event{Group: "A", Seq: 3})
		mu.Lock()
		poisonID = a[1].ID
		mu.Unlock()
		run(t, ob)
		select {
		case <-inFlight:
		case <-time.After(30 * time.Second):
			t.Fatal("timed out waiting for the poison's retry")
		}
		n, err := ob.Discard(ctx, "orders", a[1].ID)
		close(discarded)
		if err != nil || n != 1 {
			t.Fatalf("Discard: %d, %v; want 1", n, err)
		}
		eventually(t, 30*time.Second, "A3 after the discard", func() bool {
			return counts(t, ob, "orders").Pending == 0
		})
		mu.Lock()
		defer mu.Unlock()
		if len(delivered) != 2 || delivered[0] != a[0].ID || delivered[1] != a[2].ID {
			t.Errorf("delivered %v, want A1 %d then A3 %d", delivered, a[0].ID, a[2].ID)
		}
	})
}
