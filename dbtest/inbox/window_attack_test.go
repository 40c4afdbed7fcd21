package inbox_test

// Attacks on the dedup window and the stale check over time: a dead message retried
// after the messages behind it, and the pruner running through redeliveries.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
)

// TestAttackRetryDeadIsStale: message 5 of a group fails in its handler (nothing
// commits) and goes dead; 6 and 7 are handled; RetryDead sends 5 again with its key and
// ID. Inside the window it is Stale (not Duplicate: it never committed; not Claimed:
// later ones got through); once the handler commits it (skipped or processed) a
// further delivery is a Duplicate. After the window, with the group's mark pruned, it
// is Claimed, as documented.
func TestAttackRetryDeadIsStale(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		in := setup(t, db, inbox.Config{Window: time.Hour, StaleCheck: true})
		ctx := context.Background()
		g := inbox.GroupOf("orders", "order:1")
		msg := func(id int64) inbox.Message {
			return inbox.Message{Key: core.MessageKey("", core.DefaultTable, id), Group: g, Seq: id}
		}
		boom := errors.New("handler failed")
		if _, err := in.Handle(ctx, "billing", msg(5), func(context.Context, *sql.Tx, inbox.Outcome) error { return boom }); !errors.Is(err, boom) {
			t.Fatal(err)
		}
		for _, id := range []int64{6, 7} {
			if o := claim(t, in, db.DB, "billing", msg(id), true); o != inbox.Claimed {
				t.Fatalf("message %d: %v", id, o)
			}
		}
		var seen []inbox.Outcome
		h := func(_ context.Context, _ *sql.Tx, o inbox.Outcome) error { seen = append(seen, o); return nil }
		for range 2 {
			if _, err := in.Handle(ctx, "billing", msg(5), h); err != nil {
				t.Fatal(err)
			}
		}
		if len(seen) != 1 || seen[0] != inbox.Stale {
			t.Errorf("retried dead message, twice: the handler saw %v, want [stale] once", seen)
		}
		// A group's mark older than the window goes with the pruner: a message retried
		// after that is no longer known to be older.
		age(t, db, 2*time.Hour)
		if _, err := in.Prune(ctx); err != nil {
			t.Fatal(err)
		}
		seen = nil
		if _, err := in.Handle(ctx, "billing", msg(4), h); err != nil {
			t.Fatal(err)
		}
		if len(seen) != 1 || seen[0] != inbox.Claimed {
			t.Errorf("an older message after the window: %v, want [claimed] (documented)", seen)
		}
	})
}

// TestAttackPruneDuringRedeliveries: a pruner prunes in a loop while consumers take
// redeliveries of messages, half received inside the window and half received more than
// a window ago. Inside the window every redelivery is caught; outside, each key runs
// again at most once (its new record is inside the window); each key ends with one
// record. On MariaDB the pruner's deletes deadlock with the claims (a waiter's shared
// lock on a record the pruner deletes, as with a rollback; the pruner's index order
// against the claim's): the victims fail with error 1213, retryable, their work rolled
// back, never a second effect.
func TestAttackPruneDuringRedeliveries(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		in := setup(t, db, inbox.Config{Window: time.Hour, StaleCheck: true})
		effects(t, db)
		ctx := context.Background()
		const n = 40
		key := func(old bool, i int) string { return fmt.Sprintf("old=%v/%d", old, i) }
		msg := func(old bool, i int) inbox.Message {
			return inbox.Message{Key: key(old, i), Group: fmt.Sprintf("g%d", i%4), Seq: int64(i)}
		}
		for i := range n {
			claim(t, in, db.DB, "billing", msg(true, i), true)
		}
		age(t, db, 2*time.Hour)
		for i := range n {
			claim(t, in, db.DB, "billing", msg(false, i), true)
		}
		var mu sync.Mutex
		ran := map[string]int{}
		var retried []error
		var stop atomic.Bool
		pruned := make(chan error, 1)
		go func() {
			var errs []error
			for !stop.Load() {
				if _, err := in.Prune(ctx); err != nil && !retryable(db, err) {
					errs = append(errs, err)
				} else if err != nil {
					mu.Lock()
					retried = append(retried, err)
					mu.Unlock()
				}
			}
			pruned <- errors.Join(errs...)
		}()
		var wg sync.WaitGroup
		errs := make(chan error, 3*2*n*2)
		for c := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range 2 {
					for i := range n {
						for _, old := range []bool{false, true} {
							m := msg(old, (i+c*13+r*7)%n)
							for attempt := 0; ; attempt++ {
								_, err := in.Handle(ctx, "billing", m, func(ctx context.Context, tx *sql.Tx, o inbox.Outcome) error {
									mu.Lock()
									ran[m.Key]++
									mu.Unlock()
									_, err := tx.ExecContext(ctx, insertEffect(db), m.Key)
									return err
								})
								if err != nil && retryable(db, err) && attempt < 20 {
									// The handler's work rolled back: not an effect.
									mu.Lock()
									retried = append(retried, err)
									mu.Unlock()
									continue
								}
								if err != nil {
									errs <- err
								}
								break
							}
						}
					}
				}
			}()
		}
		wg.Wait()
		stop.Store(true)
		if err := <-pruned; err != nil {
			t.Errorf("Prune: %v", err)
		}
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if len(retried) > 0 {
			t.Logf("%d retryable failures (deadlocks), e.g. %v", len(retried), retried[0])
		}
		// ran counts the handler's runs, rolled back or not; the effects are the
		// committed ones.
		ran = map[string]int{}
		rows, err := db.Query(`SELECT k FROM effects`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				t.Fatal(err)
			}
			ran[k]++
		}
		rows.Close()
		for i := range n {
			if ran[key(false, i)] != 0 {
				t.Errorf("%s, inside the window, ran %d times", key(false, i), ran[key(false, i)])
			}
			if ran[key(true, i)] > 1 {
				t.Errorf("%s, after the window, ran %d times, want at most once", key(true, i), ran[key(true, i)])
			}
		}
		if got := count(t, db, `SELECT count(*) FROM outboxer_inbox`); got > 2*n || got < n {
			t.Errorf("%d records for %d keys", got, 2*n)
		}
	})
}
