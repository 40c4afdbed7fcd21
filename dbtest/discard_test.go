package dbtest_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/coretest"
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

// An admin instance (the dashboard's, the CLI's) is built with default options: ordering
// by group. Discarding the poison of an outbox its relays order in total must still
// release the whole partition behind it, as the relays recorded, not only the poison's
// own group.
func TestDiscardByAnAdminInstanceFollowsTheRecordedOrdering(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		t.Parallel()
		ctx := context.Background()
		var bad sync.Map
		rec := &recorder{coretest.Recorder{Ordering: core.OrderTotal, Fail: func(batch []core.Envelope) error {
			failed := map[int64]error{}
			for _, e := range batch {
				if _, ok := bad.Load(e.ID); ok {
					failed[e.ID] = errors.New("poison")
				}
			}
			if len(failed) == 0 {
				return nil
			}
			return &core.PartialFailure{Failed: failed}
		}}}
		ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: rec, Ordering: core.OrderTotal, PollInterval: 10 * time.Millisecond,
			Backoff: core.Backoff{Func: func(int) time.Duration { return 20 * time.Millisecond }},
		}}})
		envs := publish(t, ob, db.DB,
			event{Group: "A", Seq: 1}, event{Group: "A", Seq: 2},
			event{Group: "B", Seq: 1}, event{Group: "B", Seq: 2}, event{Seq: 9})
		poison := envs[0].ID
		bad.Store(poison, true)
		run(t, ob)
		eventually(t, 30*time.Second, "the poison to fail twice", func() bool {
			l, err := ob.ListPending(ctx, "orders", 10)
			if err != nil {
				t.Fatalf("ListPending: %v", err)
			}
			for _, e := range l {
				if e.ID == poison && e.Attempts >= 2 {
					return true
				}
			}
			return false
		})
		if d := rec.delivered(); len(d) != 0 {
			t.Fatalf("delivered %d messages behind the poison of an outbox ordered in total", len(d))
		}

		admin, err := core.New(core.Config{Name: "admin", DB: db.DB, Logger: quiet, PublishOnly: true,
			Outboxes: map[string]core.OutboxConfig{"orders": {}}})
		if err != nil {
			t.Fatalf("New admin: %v", err)
		}
		if n, err := admin.Discard(ctx, "orders", poison); err != nil || n != 1 {
			t.Fatalf("Discard = %d, %v; want 1, nil", n, err)
		}
		eventually(t, 30*time.Second, "the messages behind the poison to be delivered", func() bool {
			return counts(t, ob, "orders").Pending == 0
		})
		var got []int64
		for _, e := range rec.delivered() {
			got = append(got, e.ID)
		}
		want := []int64{envs[1].ID, envs[2].ID, envs[3].ID, envs[4].ID}
		if !slices.Equal(got, want) {
			t.Fatalf("delivered %v, want %v in order", got, want)
		}
	})
}
