package dbtest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// poisonTxRelay is a job queue in the outbox's database: it inserts a row into jobs for
// every message of a batch, in the engine's transaction, except for its poison messages,
// whose delivery fails: with a statement that fails (on PostgreSQL, it aborts the
// transaction) or by running into the delivery deadline. It then returns a
// PartialFailure naming the poison messages of the batch, and the later messages of
// their groups as held back (it writes no job for them).
type poisonTxRelay struct {
	dialect  core.Dialect
	deadline bool

	mu      sync.Mutex
	poison  map[int64]bool
	n       int64     // numbers the job rows in the order they are written
	batches [][]int64 // the IDs of every batch handed over
}

func (r *poisonTxRelay) Deliver(context.Context, []core.Envelope) error {
	return errors.New("Deliver called on a TxRelay")
}

func (r *poisonTxRelay) DeliverTx(ctx context.Context, tx *sql.Tx, batch []core.Envelope) error {
	r.mu.Lock()
	r.batches = append(r.batches, ids(batch))
	r.mu.Unlock()
	failed := map[int64]error{}
	stopped := map[string]bool{} // groups with a failed message: the rest is held back
	for _, e := range batch {
		if e.GroupKey != "" && stopped[e.GroupKey] {
			failed[e.ID] = core.ErrHeldBack
			continue
		}
		r.mu.Lock()
		bad := r.poison[e.ID]
		r.n++
		n := r.n
		r.mu.Unlock()
		if bad {
			failed[e.ID] = nil
			stopped[e.GroupKey] = e.GroupKey != ""
			continue
		}
		if _, err := tx.ExecContext(ctx, placeholders(r.dialect, `INSERT INTO jobs (n, msg_id, grp) VALUES (?, ?, ?)`), n, e.ID, e.GroupKey); err != nil {
			return fmt.Errorf("insert job %d: %w", e.ID, err)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	var err error
	if r.deadline {
		<-ctx.Done()
		err = ctx.Err()
	} else if _, err = tx.ExecContext(ctx, `INSERT INTO no_such_table VALUES (1)`); err == nil {
		err = errors.New("the failing statement did not fail")
	}
	for id, held := range failed {
		if held == nil {
			failed[id] = err
		}
	}
	return &core.PartialFailure{Failed: failed}
}

func (r *poisonTxRelay) handedOver() [][]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

func ids(batch []core.Envelope) []int64 {
	out := make([]int64, len(batch))
	for i, e := range batch {
		out[i] = e.ID
	}
	return out
}

// createJobs makes the jobs table of poisonTxRelay, empty.
func createJobs(t *testing.T, db *dbtest.DB) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS jobs (n BIGINT NOT NULL, msg_id BIGINT NOT NULL, grp VARCHAR(100) NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `DELETE FROM jobs`); err != nil {
		t.Fatal(err)
	}
}

// jobs reads the jobs committed, in the order they were written.
func jobs(t *testing.T, db *dbtest.DB) []dbtest.Delivery {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), `SELECT msg_id, grp FROM jobs ORDER BY n`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []dbtest.Delivery
	for rows.Next() {
		var d dbtest.Delivery
		if err := rows.Scan(&d.ID, &d.GroupKey); err != nil {
			t.Fatal(err)
		}
		got = append(got, d)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// A TxRelay that fails one message of a batch with a PartialFailure, after that message's
// delivery aborted the transaction (PostgreSQL) or used up the delivery deadline: only
// that message is charged and goes dead; its batch-mates of another group and of none are
// delivered once, in a transaction of their own.
func TestTxRelayPartialFailureChargesOnlyTheFailedMessage(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		t.Parallel()
		for _, c := range []struct {
			name     string
			deadline bool
		}{{"aborting statement", false}, {"delivery deadline", true}} {
			t.Run(c.name, func(t *testing.T) {
				ctx := context.Background()
				createJobs(t, db)
				box := map[bool]string{false: "statement", true: "deadline"}[c.deadline]
				relay := &poisonTxRelay{dialect: db.Dialect, deadline: c.deadline}
				ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{box: {
					Relay: relay, MaxAttempts: 2, PollInterval: 10 * time.Millisecond,
					DeliveryTimeout: 200 * time.Millisecond, Backoff: core.Backoff{Min: time.Millisecond, Max: 5 * time.Millisecond}}}})
				envs := publish(t, ob, db.DB, event{Box: box, Seq: 1, Group: "a"}, event{Box: box, Seq: 2, Group: "b"}, event{Box: box, Seq: 3})
				relay.mu.Lock()
				relay.poison = map[int64]bool{envs[0].ID: true}
				relay.mu.Unlock()
				run(t, ob)
				eventually(t, 30*time.Second, "the poison message dead and nothing pending", func() bool {
					c := counts(t, ob, box)
					return c.Dead >= 1 && c.Pending == 0
				})
				if got := counts(t, ob, box); got.Dead != 1 {
					t.Fatalf("counts %+v, want only the poison message dead", got)
				}
				dead, err := ob.ListDead(ctx, box, 0)
				if err != nil {
					t.Fatal(err)
				}
				if len(dead) != 1 || dead[0].ID != envs[0].ID || dead[0].Attempts != 2 || dead[0].LastError == "" {
					t.Fatalf("dead: %+v, want message %d alone, with 2 attempts and a reason", dead, envs[0].ID)
				}
				want := []dbtest.Delivery{{ID: envs[1].ID, GroupKey: "b"}, {ID: envs[2].ID}}
				if got := jobs(t, db); !slices.Equal(got, want) {
					t.Fatalf("jobs committed: %v, want %v", got, want)
				}
				if b := relay.handedOver(); len(b) == 0 || len(b[0]) != 3 {
					t.Fatalf("batches handed over: %v, want the three messages in the first", b)
				}
			})
		}
	})
}

// A plain Relay that fails a whole batch with a plain error because of one poison message
// in it: the engine narrows the batch, so only the poison message is charged and goes
// dead. Every other message, of its group or another, is delivered, once, in per-group
// order, and the poison message's group goes on only once it is dead.
func TestPlainErrorBatchIsNarrowedToThePoisonMessage(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		t.Parallel()
		const attempts = 2
		var (
			mu        sync.Mutex
			poison    int64
			alone     int             // deliveries of the poison message alone
			delivered []core.Envelope // in delivery order
			aloneAt   = map[int64]int{}
		)
		relay := core.RelayFunc(func(ctx context.Context, batch []core.Envelope) error {
			mu.Lock()
			defer mu.Unlock()
			for _, e := range batch {
				if e.ID == poison {
					if len(batch) == 1 {
						alone++
					}
					return errors.New("the broker rejects the batch: one of its messages is malformed")
				}
			}
			for _, e := range batch {
				delivered = append(delivered, e)
				aloneAt[e.ID] = alone
			}
			return nil
		})
		ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: relay, MaxAttempts: attempts, PollInterval: 10 * time.Millisecond,
			Backoff: core.Backoff{Min: time.Millisecond, Max: 5 * time.Millisecond}}}})
		msgs := []core.Message{
			event{Seq: 1, Group: "a"}, event{Seq: 2, Group: "b"}, event{Seq: 3, Group: "a"}, // 3: the poison
			event{Seq: 4}, event{Seq: 5, Group: "c"}, event{Seq: 6, Group: "a"}, event{Seq: 7, Group: "b"},
			event{Seq: 8}, event{Seq: 9, Group: "c"}, event{Seq: 10, Group: "a"},
		}
		envs := publish(t, ob, db.DB, msgs...)
		mu.Lock()
		poison = envs[2].ID
		mu.Unlock()
		run(t, ob)
		eventually(t, 30*time.Second, "nothing pending", func() bool {
			c := counts(t, ob, "orders")
			return c.Pending == 0 && c.Dead >= 1
		})
		if c := counts(t, ob, "orders"); c.Dead != 1 {
			t.Fatalf("counts %+v: %d innocent messages dead", c, c.Dead-1)
		}
		dead, err := ob.ListDead(context.Background(), "orders", 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(dead) != 1 || dead[0].ID != poison || dead[0].Attempts != attempts {
			t.Fatalf("dead: %+v, want message %d alone with %d attempts", dead, poison, attempts)
		}
		mu.Lock()
		defer mu.Unlock()
		var got, want []int64
		for _, e := range delivered {
			got = append(got, e.ID)
		}
		for _, e := range envs {
			if e.ID != poison {
				want = append(want, e.ID)
			}
		}
		if !slices.Equal(slices.Sorted(slices.Values(got)), want) {
			t.Fatalf("delivered %v, want every message but %d once: %v", got, poison, want)
		}
		last := map[string]int64{}
		for _, e := range delivered {
			if e.GroupKey != "" && e.ID < last[e.GroupKey] {
				t.Fatalf("group %s: %d delivered after %d", e.GroupKey, e.ID, last[e.GroupKey])
			}
			last[e.GroupKey] = e.ID
		}
		// Group a's messages after the poison one went only once it had failed its last time.
		for _, e := range envs[5:] {
			if e.GroupKey == "a" && aloneAt[e.ID] != attempts {
				t.Fatalf("message %d of the poison message's group delivered after %d of its %d attempts", e.ID, aloneAt[e.ID], attempts)
			}
		}
	})
}

// A relay that fails everything (a broker that is down) is narrowed down to one message
// at a time: each message it is handed alone is charged once, the rest of its group
// waits uncharged, and the batch costs at most 2n-1 calls.
func TestNarrowedOutageChargesEachMessageOnce(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		t.Parallel()
		ctx := context.Background()
		var calls []int // the size of each batch handed over
		relay := core.RelayFunc(func(_ context.Context, batch []core.Envelope) error {
			calls = append(calls, len(batch))
			return errors.New("connection refused")
		})
		ob := setup(t, db, core.Config{Manual: true, Outboxes: map[string]core.OutboxConfig{"orders": {Relay: relay, MaxAttempts: 3}}})
		envs := publish(t, ob, db.DB, event{Seq: 1, Group: "a"}, event{Seq: 2, Group: "b"}, event{Seq: 3, Group: "a"},
			event{Seq: 4}, event{Seq: 5, Group: "c"}, event{Seq: 6, Group: "b"}, event{Seq: 7})
		res, err := ob.Drain(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		// The heads of a, b and c, and the two ungrouped messages.
		if res.Failed != 5 || res.Dead != 0 || res.Delivered != 0 {
			t.Fatalf("Drain: %+v, want 5 failed", res)
		}
		if len(calls) == 0 || calls[0] != len(envs) || len(calls) > 2*len(envs)-1 {
			t.Fatalf("batches handed over: %v, want the %d first and at most %d calls", calls, len(envs), 2*len(envs)-1)
		}
		pending, err := ob.ListPending(ctx, "orders", 0)
		if err != nil {
			t.Fatal(err)
		}
		want := map[int64]int{envs[0].ID: 1, envs[1].ID: 1, envs[2].ID: 0, envs[3].ID: 1, envs[4].ID: 1, envs[5].ID: 0, envs[6].ID: 1}
		for _, p := range pending {
			if p.Attempts != want[p.ID] {
				t.Errorf("message %d (group %q): %d attempts, want %d", p.ID, p.GroupKey, p.Attempts, want[p.ID])
			}
		}
		if len(pending) != len(envs) {
			t.Fatalf("%d pending, want %d", len(pending), len(envs))
		}
	})
}

// A broker that does not answer runs every delivery into the delivery timeout. Narrowing
// such a batch part by part would wait out a timeout for each of its 2n-1 parts; the
// engine tries the two halves, finds the broker down, and charges the batch: three calls,
// each message charged once (the head of each group; the rest waits behind it uncharged).
func TestNarrowingAHungBrokerCostsThreeTimeouts(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		t.Parallel()
		ctx := context.Background()
		var (
			mu    sync.Mutex
			calls []int
		)
		relay := core.RelayFunc(func(ctx context.Context, batch []core.Envelope) error {
			mu.Lock()
			calls = append(calls, len(batch))
			mu.Unlock()
			<-ctx.Done()
			return ctx.Err()
		})
		ob := setup(t, db, core.Config{Manual: true, Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: relay, BatchSize: 16, DeliveryTimeout: 50 * time.Millisecond}}})
		var msgs []core.Message
		for i := range 14 {
			msgs = append(msgs, event{Seq: i, Group: fmt.Sprintf("g%d", i)})
		}
		// Behind their heads: g0 in the first half (so left out of the second), g9 in the second.
		msgs = append(msgs, event{Seq: 14, Group: "g0"}, event{Seq: 15, Group: "g9"})
		envs := publish(t, ob, db.DB, msgs...)
		res, err := ob.Drain(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if want := []int{16, 8, 7}; !slices.Equal(calls, want) {
			t.Errorf("batches handed over: %v, want %v (the batch, its first half, the second half less the first half's groups)", calls, want)
		}
		if res.Failed != 14 || res.Dead != 0 || res.Delivered != 0 {
			t.Fatalf("Drain: %+v, want 14 failed (the heads of 14 groups)", res)
		}
		pending, err := ob.ListPending(ctx, "orders", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pending {
			want := 1
			if p.ID == envs[14].ID || p.ID == envs[15].ID {
				want = 0
			}
			if p.Attempts != want {
				t.Errorf("message %d (group %q): %d attempts, want %d", p.ID, p.GroupKey, p.Attempts, want)
			}
			if want == 1 && !strings.Contains(p.LastError, "deadline") {
				t.Errorf("message %d: last error %q, want the delivery's deadline", p.ID, p.LastError)
			}
		}
		if len(pending) != len(envs) {
			t.Fatalf("%d pending, want %d", len(pending), len(envs))
		}
	})
}

// A message that makes its batch hang (the broker answers every batch without it) is
// found by halving: one timed-out call a halving, the other messages delivered, the
// poison alone charged.
func TestNarrowingFindsAMessageThatHangsItsBatch(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		t.Parallel()
		ctx := context.Background()
		var (
			mu     sync.Mutex
			poison int64
			hung   int
		)
		relay := core.RelayFunc(func(ctx context.Context, batch []core.Envelope) error {
			mu.Lock()
			bad := slices.ContainsFunc(batch, func(e core.Envelope) bool { return e.ID == poison })
			if bad {
				hung++
			}
			mu.Unlock()
			if bad {
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		})
		ob := setup(t, db, core.Config{Manual: true, Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: relay, BatchSize: 16, DeliveryTimeout: 50 * time.Millisecond, MaxAttempts: 1}}})
		var msgs []core.Message
		for i := range 16 {
			msgs = append(msgs, event{Seq: i, Group: fmt.Sprintf("g%d", i)})
		}
		envs := publish(t, ob, db.DB, msgs...)
		mu.Lock()
		poison = envs[5].ID
		mu.Unlock()
		res, err := ob.Drain(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		if res.Delivered != 15 || res.Dead != 1 || res.Failed != 0 {
			t.Fatalf("Drain: %+v, want 15 delivered and the poison dead", res)
		}
		dead, err := ob.ListDead(ctx, "orders", 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(dead) != 1 || dead[0].ID != poison {
			t.Fatalf("dead: %+v, want message %d alone", dead, poison)
		}
		mu.Lock()
		defer mu.Unlock()
		if hung != 5 {
			t.Errorf("%d deliveries ran into the timeout, want 5 (the batch of 16, then 8, 4, 2 and 1)", hung)
		}
	})
}
