package dbtest_test

// Narrowing a failed batch beyond one node and one ordering: OrderTotal and OrderNone with
// MaxAttempts 1, an outage seen by two nodes, Pause between the parts, a pool of one
// connection, and the lease taken by another node mid-narrowing.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// A plain Relay failing every batch that holds one poison message, in OrderTotal and
// OrderNone, with MaxAttempts 1 and messages before the poison in the batch: only the
// poison goes dead, on its first attempt; every other message is delivered once, in ID
// order for OrderTotal, and in OrderTotal nothing after the poison goes before it is dead.
func TestNarrowingInTotalAndNoOrdering(t *testing.T) {
	for _, ord := range []core.Ordering{core.OrderTotal, core.OrderNone} {
		t.Run(fmt.Sprint(ord), func(t *testing.T) {
			dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
				t.Parallel()
				var (
					mu        sync.Mutex
					poison    int64
					poisoned  bool // the poison was handed over alone
					delivered []core.Envelope
					early     []int64 // delivered after the poison's ID before it was dead
				)
				relay := core.RelayFunc(func(_ context.Context, batch []core.Envelope) error {
					mu.Lock()
					defer mu.Unlock()
					for _, e := range batch {
						if e.ID == poison {
							if len(batch) == 1 {
								poisoned = true
							}
							return errors.New("the broker rejects the batch")
						}
					}
					for _, e := range batch {
						if e.ID > poison && !poisoned {
							early = append(early, e.ID)
						}
						delivered = append(delivered, e)
					}
					return nil
				})
				ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {
					Relay: relay, Ordering: ord, MaxAttempts: 1, BatchSize: 16, PollInterval: 10 * time.Millisecond}}})
				var msgs []core.Message
				for i := range 40 {
					msgs = append(msgs, event{Seq: i, Group: fmt.Sprintf("g%d", i%3)})
				}
				mu.Lock()
				envs := publish(t, ob, db.DB, msgs...)
				poison = envs[11].ID // 11 messages before it in its batch, 3 of its group
				mu.Unlock()
				run(t, ob)
				eventually(t, 30*time.Second, "nothing pending", func() bool {
					c := counts(t, ob, "orders")
					return c.Pending == 0 && c.Dead >= 1
				})
				dead, err := ob.ListDead(context.Background(), "orders", 0)
				if err != nil {
					t.Fatal(err)
				}
				if len(dead) != 1 || dead[0].ID != poison || dead[0].Attempts != 1 {
					t.Fatalf("dead: %+v, want message %d alone, after 1 attempt", dead, poison)
				}
				mu.Lock()
				defer mu.Unlock()
				var got []int64
				for _, e := range delivered {
					got = append(got, e.ID)
				}
				var want []int64
				for _, e := range envs {
					if e.ID != poison {
						want = append(want, e.ID)
					}
				}
				if ord == core.OrderTotal {
					if !slices.Equal(got, want) {
						t.Fatalf("delivered %v, want %v in this order", got, want)
					}
					if len(early) > 0 {
						t.Fatalf("messages %v went before the poison %d was dead", early, poison)
					}
					return
				}
				if !slices.Equal(slices.Sorted(slices.Values(got)), want) {
					t.Fatalf("delivered %v, want every message but %d once", got, poison)
				}
			})
		})
	}
}

// A broker that is down, seen by two nodes relaying one table of four partitions with
// MaxAttempts 1: the narrowing hands each message over alone once and that attempt makes
// it dead. Every message ends dead with one attempt: none charged twice, none lost, none
// delivered.
func TestNarrowedOutageOnTwoNodes(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		t.Parallel()
		var (
			mu    sync.Mutex
			alone = map[int64]int{}
		)
		relay := core.RelayFunc(func(_ context.Context, batch []core.Envelope) error {
			if len(batch) == 1 {
				mu.Lock()
				alone[batch[0].ID]++
				mu.Unlock()
			}
			return errors.New("connection refused")
		})
		cfg := func() core.Config {
			return core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {
				Relay: relay, Partitions: 4, MaxAttempts: 1, BatchSize: 20, PollInterval: 10 * time.Millisecond}}}
		}
		a := setup(t, db, cfg())
		b := setup(t, db, cfg())
		var msgs []core.Message
		for i := range 300 {
			g := fmt.Sprintf("g%d", i%25)
			if i%7 == 0 {
				g = ""
			}
			msgs = append(msgs, event{Seq: i, Group: g})
		}
		envs := publish(t, a, db.DB, msgs...)
		run(t, a)
		run(t, b)
		eventually(t, time.Minute, "every message dead", func() bool { return counts(t, a, "orders").Dead == int64(len(envs)) })
		dead, err := a.ListDead(context.Background(), "orders", 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(dead) != len(envs) {
			t.Fatalf("%d dead, want %d", len(dead), len(envs))
		}
		for _, d := range dead {
			if d.Attempts != 1 {
				t.Errorf("message %d (group %q): %d attempts, want 1", d.ID, d.GroupKey, d.Attempts)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, e := range envs {
			if alone[e.ID] != 1 {
				t.Errorf("message %d (group %q) handed over alone %d times, want once", e.ID, e.GroupKey, alone[e.ID])
			}
		}
	})
}

// Pause called while a failed batch is being narrowed: once Pause has returned, no further
// part is handed over, and no message is charged for a part that was not tried.
func TestNarrowingStopsAtPause(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		t.Parallel()
		ctx := context.Background()
		var (
			mu     sync.Mutex
			calls  int
			after  int // calls once Pause returned
			paused bool
			ob     *core.Outboxer
		)
		relay := core.RelayFunc(func(_ context.Context, batch []core.Envelope) error {
			mu.Lock()
			calls++
			if paused {
				after++
			}
			first := calls == 1
			mu.Unlock()
			if first {
				if err := ob.Pause(ctx, "orders"); err != nil {
					t.Errorf("Pause: %v", err)
				}
				mu.Lock()
				paused = true
				mu.Unlock()
			}
			return errors.New("connection refused")
		})
		ob = setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: relay, MaxAttempts: 1, BatchSize: 32, PollInterval: 10 * time.Millisecond}}})
		var msgs []core.Message
		for i := range 32 {
			msgs = append(msgs, event{Seq: i, Group: fmt.Sprintf("g%d", i)})
		}
		publish(t, ob, db.DB, msgs...)
		run(t, ob)
		eventually(t, 30*time.Second, "Pause called", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return paused
		})
		time.Sleep(300 * time.Millisecond) // what a paused worker must not do, given the time to
		mu.Lock()
		n, a := calls, after
		mu.Unlock()
		if a != 0 {
			t.Fatalf("%d parts handed over after Pause returned (%d calls in all)", a, n)
		}
		if c := counts(t, ob, "orders"); c.Dead != 0 || c.Pending != int64(len(msgs)) {
			t.Fatalf("counts %+v, want all %d pending and none dead", c, len(msgs))
		}
		pending, err := ob.ListPending(ctx, "orders", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pending {
			if p.Attempts != 0 {
				t.Errorf("message %d charged %d attempts, though no part with it was tried", p.ID, p.Attempts)
			}
		}
	})
}

// asideRelay is a recorder failing the head of each poisoned group (by ID) with a
// A relay instance on a pool of one connection, with a TxRelay that spoils its
// transactions with a poison message: the narrowing, the reading of what a failed
// delivery left, the recording of failures and the set-aside all go through the one
// connection, one after the other, and the poison alone goes dead.
func TestNarrowingOnAPoolOfOne(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		t.Parallel()
		createJobs(t, db)
		relay := &poisonTxRelay{dialect: db.Dialect}
		ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: relay, MaxAttempts: 2, BatchSize: 10, PollInterval: 10 * time.Millisecond,
			Backoff: core.Backoff{Min: 10 * time.Millisecond, Max: 10 * time.Millisecond}}}})
		var msgs []core.Message
		for i := range 60 {
			msgs = append(msgs, event{Seq: i, Group: fmt.Sprintf("g%d", i%4)})
		}
		envs := publish(t, ob, db.DB, msgs...)
		relay.mu.Lock()
		relay.poison = map[int64]bool{envs[5].ID: true}
		relay.mu.Unlock()
		db.SetMaxOpenConns(1)
		run(t, ob)
		eventually(t, time.Minute, "the poison dead and nothing pending", func() bool {
			c := counts(t, ob, "orders")
			return c.Pending == 0 && c.Dead >= 1
		})
		if c := counts(t, ob, "orders"); c.Dead != 1 {
			t.Fatalf("counts %+v, want the poison alone dead", c)
		}
		got := jobs(t, db)
		if len(got) != len(envs)-1 {
			t.Fatalf("%d jobs committed, want %d", len(got), len(envs)-1)
		}
		var delivered []core.Envelope
		for _, j := range got {
			delivered = append(delivered, core.Envelope{ID: j.ID, GroupKey: j.GroupKey})
		}
		checkGroupOrder(t, slices.DeleteFunc(slices.Clone(envs), func(e core.Envelope) bool { return e.ID == envs[5].ID }), delivered)
	})
}

// The partition's lease taken by another node while a failed batch is being narrowed
// (its owner and token changed under the worker): nothing the worker then decides is
// recorded. No message is charged, made dead or removed, though the relay failed the
// poison alone with MaxAttempts 1.
func TestNarrowingAfterTheLeaseWasTaken(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		t.Parallel()
		ctx := context.Background()
		var (
			mu     sync.Mutex
			poison int64
			stolen bool
			after  int // calls once the lease was taken
		)
		relay := core.RelayFunc(func(_ context.Context, batch []core.Envelope) error {
			mu.Lock()
			defer mu.Unlock()
			if stolen {
				after++
			} else {
				stolen = true
				if _, err := db.ExecContext(ctx, `UPDATE `+core.DefaultTable+`_leases SET owner = 'another node', token = token + 1 WHERE outbox = 'orders' AND part = 0`); err != nil {
					t.Errorf("take the lease: %v", err)
				}
			}
			for _, e := range batch {
				if e.ID == poison {
					return errors.New("the broker rejects the batch")
				}
			}
			return nil
		})
		ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: relay, MaxAttempts: 1, BatchSize: 16, PollInterval: 10 * time.Millisecond}}})
		var msgs []core.Message
		for i := range 16 {
			msgs = append(msgs, event{Seq: i, Group: fmt.Sprintf("g%d", i%4)})
		}
		mu.Lock()
		envs := publish(t, ob, db.DB, msgs...)
		poison = envs[9].ID
		mu.Unlock()
		run(t, ob)
		eventually(t, 30*time.Second, "the narrowing handed parts over", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return after > 0
		})
		time.Sleep(500 * time.Millisecond) // time for a confirmation that must not go through
		if c := counts(t, ob, "orders"); c.Dead != 0 || c.Pending != int64(len(envs)) {
			t.Fatalf("counts %+v after the lease was taken, want all %d pending, none dead", c, len(envs))
		}
		pending, err := ob.ListPending(ctx, "orders", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pending {
			if p.Attempts != 0 {
				t.Errorf("message %d charged %d attempts by a worker whose lease was taken", p.ID, p.Attempts)
			}
		}
		mu.Lock()
		t.Logf("%d parts handed over after the lease was taken", after)
		mu.Unlock()
	})
}

// asideJoinBacklog is the poisoned group's backlog in TestSetAsideWhileASecondNodeJoins.
const asideJoinBacklog = 20000
