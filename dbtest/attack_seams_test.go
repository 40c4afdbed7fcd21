package dbtest_test

// The seams of narrowing a failed batch and of setting a blocked group aside: orderings
// other than by group, MaxAttempts 1, an outage seen by two nodes, Pause between the
// parts, group keys that differ only in case or spaces, more blocked groups than the
// set-aside list holds, and a head discarded and retried while its group is set aside.

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
// PartialFailure until it is let through.
type asideRelay struct {
	recorder
	mu     sync.Mutex
	poison map[int64]bool
	failed map[int64]bool // heads that have failed once
}

func newAsideRelay() *asideRelay {
	r := &asideRelay{poison: map[int64]bool{}, failed: map[int64]bool{}}
	r.Fail = func(batch []core.Envelope) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		pf := &core.PartialFailure{Failed: map[int64]error{}}
		for _, e := range batch {
			if r.poison[e.ID] {
				pf.Failed[e.ID] = errors.New("poison")
				r.failed[e.ID] = true
			}
		}
		if len(pf.Failed) == 0 {
			return nil
		}
		return pf
	}
	return r
}

func (r *asideRelay) set(id int64, poisoned bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.poison[id] = poisoned
}

func (r *asideRelay) allFailed(ids ...int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		if !r.failed[id] {
			return false
		}
	}
	return true
}

// deliveredOf counts the messages delivered whose group is not in poisoned.
func deliveredOf(r *asideRelay, poisoned map[string]bool) int {
	n := 0
	for _, e := range r.delivered() {
		if !poisoned[e.GroupKey] {
			n++
		}
	}
	return n
}

// A group blocked and set aside whose key differs from other groups' only in case or in
// trailing or leading spaces (MariaDB compares such strings equal under most collations):
// those groups are not the blocked one. They go while it is set aside, in order, and once
// the head is discarded the blocked group goes, in order, none lost or twice.
func TestSetAsideGroupKeysDifferingInCaseAndSpaces(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		t.Parallel()
		ctx := context.Background()
		rec := newAsideRelay()
		ob := setup(t, db, core.Config{Table: "aside_keys", Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: rec, BatchSize: 20, PollInterval: 10 * time.Millisecond,
			Backoff: core.Backoff{Func: func(int) time.Duration { return time.Hour }}}}})
		head := publish(t, ob, db.DB, event{Seq: 0, Group: "Key"})
		rec.set(head[0].ID, true)
		published := slices.Clone(head)
		others := []string{"key", "KEY", "Key ", " Key", "Key  "}
		for r := range 30 {
			msgs := []core.Message{}
			for range 10 {
				msgs = append(msgs, event{Seq: r, Group: "Key"})
			}
			for _, g := range others {
				msgs = append(msgs, event{Seq: r, Group: g})
			}
			published = append(published, publish(t, ob, db.DB, msgs...)...)
		}
		run(t, ob)
		want := 30 * len(others)
		eventually(t, time.Minute, "the other keys' messages delivered", func() bool {
			return deliveredOf(rec, map[string]bool{"Key": true}) == want
		})
		for _, e := range rec.delivered() {
			if e.GroupKey == "Key" {
				t.Fatalf("message %d of the blocked group delivered while its head waits", e.ID)
			}
		}
		if n, err := ob.Discard(ctx, "orders", head[0].ID); err != nil || n != 1 {
			t.Fatalf("Discard = %d, %v; want 1, nil", n, err)
		}
		published = published[1:]
		eventually(t, time.Minute, "every message delivered", func() bool { return counts(t, ob, "orders").Pending == 0 })
		got := rec.delivered()
		if len(got) != len(published) {
			t.Errorf("delivered %d, want %d", len(got), len(published))
		}
		checkGroupOrder(t, published, got)
	})
}

// Five blocked groups (one more than the set-aside list holds), each with a backlog of
// many chunks, and other groups published among them. Their heads fail twice, the second
// time for good, while their backlogs may still be being set aside; one head is
// discarded before that, and another is put back by RetryDead the moment it is dead, and
// let through: every other message goes once, the revived head too, and the rest of
// each group in ID order.
func TestSetAsideFiveBlockedGroupsDeadDiscardedAndRetried(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		t.Parallel()
		ctx := context.Background()
		const (
			blocked = 5
			backlog = 10000 // in all, of the five groups
		)
		rec := newAsideRelay()
		var (
			ob      *core.Outboxer
			heads   []int64
			revived = make(chan error, 1)
		)
		ob = setup(t, db, core.Config{Table: "aside_five",
			Hooks: core.Hooks{OnDead: func(e core.MessageEvent) {
				if len(heads) > 0 && e.ID == heads[0] {
					go func() {
						rec.set(heads[0], false)
						n, err := ob.RetryDead(ctx, "orders", heads[0])
						if err == nil && n != 1 {
							err = fmt.Errorf("RetryDead revived %d, want 1", n)
						}
						revived <- err
					}()
				}
			}},
			Outboxes: map[string]core.OutboxConfig{"orders": {
				Relay: rec, BatchSize: 50, PollInterval: 10 * time.Millisecond, MaxAttempts: 2,
				Backoff: core.Backoff{Func: func(int) time.Duration { return 2 * time.Second }}}}})
		var published []core.Envelope
		for i := range blocked {
			h := publish(t, ob, db.DB, event{Seq: 0, Group: fmt.Sprintf("blocked:%d", i)})
			rec.set(h[0].ID, true)
			heads = append(heads, h[0].ID)
			published = append(published, h...)
		}
		for from := 0; from < backlog; from += 500 {
			var msgs []core.Message
			for i := range 500 {
				msgs = append(msgs, event{Seq: from + i, Group: fmt.Sprintf("blocked:%d", i%blocked)})
			}
			for i := range 20 {
				msgs = append(msgs, event{Seq: from, Group: fmt.Sprintf("other:%d", i)})
			}
			published = append(published, publish(t, ob, db.DB, msgs...)...)
		}
		run(t, ob)
		eventually(t, time.Minute, "every head failed", func() bool { return rec.allFailed(heads...) })
		if n, err := ob.Discard(ctx, "orders", heads[1]); err != nil || n != 1 {
			t.Fatalf("Discard = %d, %v; want 1, nil", n, err)
		}
		select {
		case err := <-revived:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			t.Fatal("the first head did not go dead within a minute")
		}
		eventually(t, 3*time.Minute, "every message delivered or dead", func() bool {
			c := counts(t, ob, "orders")
			return c.Pending == 0 && c.Dead == blocked-2
		})
		gone := map[int64]bool{heads[1]: true, heads[2]: true, heads[3]: true, heads[4]: true}
		got := rec.delivered()
		seen := map[int64]int{}
		for _, e := range got {
			seen[e.ID]++
		}
		var rest []core.Envelope
		for _, e := range published {
			if gone[e.ID] {
				if seen[e.ID] != 0 {
					t.Errorf("head %d delivered %d times, want never", e.ID, seen[e.ID])
				}
				continue
			}
			if seen[e.ID] != 1 {
				t.Errorf("message %d (group %s) delivered %d times, want once", e.ID, e.GroupKey, seen[e.ID])
			}
			if e.ID != heads[0] {
				rest = append(rest, e)
			}
		}
		// The revived head may go after its group (it was dead); the rest keep order.
		checkGroupOrder(t, rest, slices.DeleteFunc(slices.Clone(got), func(e core.Envelope) bool { return e.ID == heads[0] }))
	})
}

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

// A poisoned group with a large backlog is being set aside when a second node joins and
// the partitions are dealt again: the other groups' messages published then are
// delivered while the group stays blocked, and once its head is discarded every message
// behind it goes, in order, none lost and none twice, whichever node holds its partition.
func TestSetAsideWhileASecondNodeJoins(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		t.Parallel()
		ctx := context.Background()
		rec := newAsideRelay()
		cfg := func() core.Config {
			return core.Config{Table: "aside_join", LeaseDuration: 2 * time.Second, Outboxes: map[string]core.OutboxConfig{"orders": {
				Relay: rec, Partitions: 2, BatchSize: 200, PollInterval: 10 * time.Millisecond,
				Backoff: core.Backoff{Func: func(int) time.Duration { return time.Hour }}}}}
		}
		a := setup(t, db, cfg())
		head := publish(t, a, db.DB, event{Seq: 0, Group: "poison"})
		rec.set(head[0].ID, true)
		var published []core.Envelope
		for from := 0; from < asideJoinBacklog; from += 2000 {
			msgs := make([]core.Message, 0, 2000)
			for i := range cap(msgs) {
				msgs = append(msgs, event{Seq: from + i, Group: "poison"})
			}
			published = append(published, publish(t, a, db.DB, msgs...)...)
		}
		run(t, a)
		eventually(t, time.Minute, "the head failed", func() bool { return rec.allFailed(head[0].ID) })
		b := setup(t, db, cfg())
		run(t, b)
		for r := range 10 {
			msgs := make([]core.Message, 100)
			for i := range msgs {
				msgs[i] = event{Seq: r, Group: fmt.Sprintf("other:%d", i)}
			}
			published = append(published, publish(t, a, db.DB, msgs...)...)
		}
		eventually(t, 2*time.Minute, "the other groups delivered", func() bool {
			return deliveredOf(rec, map[string]bool{"poison": true}) == 1000
		})
		for _, e := range rec.delivered() {
			if e.GroupKey == "poison" {
				t.Fatalf("message %d of the poisoned group delivered while its head waits", e.ID)
			}
		}
		if n, err := a.Discard(ctx, "orders", head[0].ID); err != nil || n != 1 {
			t.Fatalf("Discard = %d, %v; want 1, nil", n, err)
		}
		eventually(t, 5*time.Minute, "every message delivered", func() bool { return counts(t, a, "orders").Pending == 0 })
		got := rec.delivered()
		if len(got) != len(published) {
			t.Errorf("delivered %d, want %d", len(got), len(published))
		}
		checkGroupOrder(t, published, got)
	})
}
