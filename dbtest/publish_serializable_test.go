package dbtest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// Transactions that publish 1,000 messages each with PublishAll at SERIALIZABLE (the
// pool's default) commit, while three relays deliver the outbox and narrow the batches a
// poison message spoils, and set its group's backlog aside. Every message but the
// poison is delivered once.
func TestPublishAllOf1000AtSerializableWhileRelaysNarrow(t *testing.T) {
	t.Parallel()
	for _, d := range []core.Dialect{core.Postgres, core.MySQL} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			db := dbtest.Open(t, d)
			strict := serializable(t, db)
			ctx := context.Background()
			admin := setup(t, db, core.Config{PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {}}})
			var (
				mu     sync.Mutex
				poison = map[int64]bool{}
				seen   = map[int64]int{}
			)
			relay := core.RelayFunc(func(_ context.Context, batch []core.Envelope) error {
				mu.Lock()
				defer mu.Unlock()
				for _, e := range batch {
					if poison[e.ID] {
						return errors.New("the broker rejects the batch")
					}
				}
				for _, e := range batch {
					seen[e.ID]++
				}
				return nil
			})
			for range 3 {
				ob, err := core.New(core.Config{DB: strict.DB, Logger: quiet, LeaseDuration: 2 * time.Second,
					Outboxes: map[string]core.OutboxConfig{"orders": {Relay: relay, Partitions: 6, BatchSize: 50, MaxAttempts: 3,
						PollInterval: 5 * time.Millisecond, Backoff: core.Backoff{Min: 100 * time.Millisecond, Max: 100 * time.Millisecond}}}})
				if err != nil {
					t.Fatal(err)
				}
				run(t, ob)
			}
			const publishers, rounds, per = 4, 3, 1000
			var wg sync.WaitGroup
			errs := make(chan error, publishers*rounds)
			var all sync.Map // ID → true, every message published
			for p := range publishers {
				pub, err := core.New(core.Config{DB: strict.DB, Logger: quiet, PublishOnly: true,
					Outboxes: map[string]core.OutboxConfig{"orders": {Partitions: 6}}})
				if err != nil {
					t.Fatal(err)
				}
				wg.Go(func() {
					for r := range rounds {
						msgs := make([]core.Message, per)
						for i := range msgs {
							msgs[i] = event{Seq: i, Group: fmt.Sprintf("g%d", i%50)}
						}
						tx, err := strict.BeginTx(ctx, nil)
						if err != nil {
							errs <- err
							return
						}
						envs, err := pub.PublishAll(ctx, tx, msgs)
						if err != nil {
							tx.Rollback()
							errs <- fmt.Errorf("publisher %d, round %d: PublishAll: %w", p, r, err)
							continue
						}
						if r == 0 && p == 0 {
							mu.Lock()
							poison[envs[7].ID] = true
							mu.Unlock()
						}
						if err := tx.Commit(); err != nil {
							errs <- fmt.Errorf("publisher %d, round %d: commit: %w", p, r, err)
							continue
						}
						for _, e := range envs {
							all.Store(e.ID, true)
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if t.Failed() {
				return
			}
			eventually(t, 2*time.Minute, "every message delivered or dead", func() bool {
				c := counts(t, admin, "orders")
				return c.Pending == 0 && c.Dead >= 1
			})
			if c := counts(t, admin, "orders"); c.Dead != 1 {
				t.Fatalf("counts %+v, want the poison alone dead", c)
			}
			mu.Lock()
			defer mu.Unlock()
			n := 0
			all.Range(func(k, _ any) bool {
				id := k.(int64)
				n++
				if want := map[bool]int{true: 0, false: 1}[poison[id]]; seen[id] != want {
					t.Errorf("message %d delivered %d times, want %d", id, seen[id], want)
				}
				return true
			})
			if n != publishers*rounds*per {
				t.Fatalf("%d published, want %d", n, publishers*rounds*per)
			}
		})
	}
}
