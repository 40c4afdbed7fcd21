package dbtest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/coretest"
	"github.com/outboxer-go/outboxer/dbtest"
)

// fast retries keep the tests short; the default backoff is tested in the core.
var fast = core.Backoff{Func: func(int) time.Duration { return time.Millisecond }}

// checkGroupOrder fails unless, for every group, the messages confirmed are exactly the
// ones published, in publishing order.
func checkGroupOrder(t testing.TB, published, delivered []core.Envelope) {
	t.Helper()
	want := map[string][]int64{}
	for _, e := range published {
		if e.GroupKey != "" {
			want[e.GroupKey] = append(want[e.GroupKey], e.ID)
		}
	}
	got := map[string][]int64{}
	for _, e := range delivered {
		if e.GroupKey != "" {
			got[e.GroupKey] = append(got[e.GroupKey], e.ID)
		}
	}
	for g, ids := range want {
		if !slices.Equal(got[g], ids) {
			t.Errorf("group %s: delivered %v\nwant %v", g, got[g], ids)
		}
	}
}

func TestOrderPerGroupUnderRandomFailures(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		const n = 3000
		relayRNG := rand.New(rand.NewPCG(1, 2)) // used under the recorder's lock
		rec := &recorder{}
		var failures atomic.Int64
		rec.Fail = func(batch []core.Envelope) error {
			switch r := relayRNG.IntN(100); {
			case r < 15:
				failures.Add(1)
				return errors.New("broker unavailable")
			case r < 35:
				failed := map[int64]error{}
				for _, e := range batch {
					if relayRNG.IntN(4) == 0 {
						failed[e.ID] = errors.New("rejected")
					}
				}
				if len(failed) > 0 {
					failures.Add(1)
					return &core.PartialFailure{Failed: failed}
				}
			}
			return nil
		}
		ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: rec, Partitions: 4, BatchSize: 50, PollInterval: 10 * time.Millisecond, Backoff: fast,
		}}})
		run(t, ob)
		var published []core.Envelope
		rng := rand.New(rand.NewPCG(3, 4)) // the relay's generator is its own
		for i := 0; i < n; i += 100 {
			msgs := make([]core.Message, 100)
			for j := range msgs {
				g := fmt.Sprintf("order:%d", rng.IntN(40))
				if rng.IntN(10) == 0 {
					g = "" // unordered
				}
				msgs[j] = event{Seq: i + j, Group: g}
			}
			published = append(published, publish(t, ob, db.DB, msgs...)...)
		}
		eventually(t, 90*time.Second, "every message delivered", func() bool {
			return len(rec.delivered()) >= n && counts(t, ob, "orders").Pending == 0
		})
		delivered := rec.delivered()
		if len(delivered) != n {
			t.Fatalf("delivered %d, want %d", len(delivered), n)
		}
		checkGroupOrder(t, published, delivered)
		if c := counts(t, ob, "orders"); c != (core.Counts{}) {
			t.Errorf("counts after delivery: %+v", c)
		}
		if failures.Load() == 0 {
			t.Error("no failure was injected: the test proves nothing")
		}
	})
}

// poison fails every delivery of the message with the given ID.
func poison(id *atomic.Int64) func([]core.Envelope) error {
	return func(batch []core.Envelope) error {
		for _, e := range batch {
			if e.ID == id.Load() {
				return &core.PartialFailure{Failed: map[int64]error{e.ID: errors.New("poison")}}
			}
		}
		return nil
	}
}

func TestPoisonMessageWithInfiniteAttempts(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		var bad atomic.Int64
		bad.Store(-1)
		rec := &recorder{coretest.Recorder{Fail: poison(&bad)}}
		ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: rec, PollInterval: 10 * time.Millisecond, Backoff: core.Backoff{Min: 20 * time.Millisecond, Max: 20 * time.Millisecond},
		}}})
		a := publish(t, ob, db.DB, event{Group: "A", Seq: 1}, event{Group: "A", Seq: 2}, event{Group: "A", Seq: 3},
			event{Group: "B", Seq: 1}, event{Seq: 9}, event{Group: "B", Seq: 2})
		bad.Store(a[1].ID) // A's second message
		run(t, ob)
		eventually(t, 20*time.Second, "A1, B and the unordered message", func() bool { return len(rec.delivered()) == 4 })
		// The poison keeps failing and holds A3 back, never more.
		eventually(t, 20*time.Second, "several attempts", func() bool {
			p, _ := ob.ListPending(ctx, "orders", 10)
			return len(p) == 2 && p[0].ID == a[1].ID && p[0].Attempts >= 3
		})
		pending, _ := ob.ListPending(ctx, "orders", 10)
		if pending[0].LastError == "" || pending[1].ID != a[2].ID || pending[1].Attempts != 0 {
			t.Errorf("pending = %+v", pending)
		}
		for _, e := range rec.delivered() {
			if e.ID == a[2].ID {
				t.Fatal("A3 was delivered while A2 was failing")
			}
		}
		// Discarding the poison lets the group move on.
		if n, err := ob.Discard(ctx, "orders", a[1].ID); err != nil || n != 1 {
			t.Fatalf("Discard: %d, %v", n, err)
		}
		eventually(t, 20*time.Second, "A3 after the discard", func() bool { return len(rec.delivered()) == 5 })
		checkGroupOrder(t, []core.Envelope{a[0], a[2], a[3], a[5]}, rec.delivered())
	})
}

func TestPoisonMessageWithFiniteAttemptsGoesDeadAndCanBeRetried(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		var bad atomic.Int64
		bad.Store(-1)
		rec := &recorder{coretest.Recorder{Fail: poison(&bad)}}
		var deadEvents atomic.Int64
		ob := setup(t, db, core.Config{
			Hooks: core.Hooks{OnDead: func(core.MessageEvent) { deadEvents.Add(1) }},
			Outboxes: map[string]core.OutboxConfig{"orders": {
				Relay: rec, PollInterval: 10 * time.Millisecond, MaxAttempts: 3, Backoff: fast,
			}}})
		a := publish(t, ob, db.DB, event{Group: "A", Seq: 1}, event{Group: "A", Seq: 2}, event{Group: "A", Seq: 3})
		bad.Store(a[1].ID)
		run(t, ob)
		eventually(t, 20*time.Second, "A1 and A3 delivered and A2 dead", func() bool {
			return len(rec.delivered()) == 2 && counts(t, ob, "orders") == (core.Counts{Dead: 1})
		})
		dead, err := ob.ListDead(ctx, "orders", 0)
		if err != nil || len(dead) != 1 || dead[0].ID != a[1].ID || dead[0].Attempts != 3 || dead[0].State != core.Dead || dead[0].LastError == "" {
			t.Fatalf("dead = %+v, %v", dead, err)
		}
		if deadEvents.Load() != 1 {
			t.Errorf("OnDead fired %d times", deadEvents.Load())
		}
		// Fixed: the revived message goes out with its own ID.
		bad.Store(-1)
		if n, err := ob.RetryDead(ctx, "orders"); err != nil || n != 1 {
			t.Fatalf("RetryDead: %d, %v", n, err)
		}
		eventually(t, 20*time.Second, "the revived message", func() bool { return len(rec.delivered()) == 3 })
		if got := rec.delivered()[2]; got.ID != a[1].ID || got.Attempts != 0 {
			t.Errorf("revived = %+v, want ID %d with attempts reset", got, a[1].ID)
		}
	})
}

func TestPermanentErrorIsDeadAtOnce(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		rec := &recorder{}
		var first int64
		rec.Fail = func(batch []core.Envelope) error {
			if batch[0].ID == first {
				return &core.PartialFailure{Failed: map[int64]error{first: core.Permanent(errors.New("too large"))}}
			}
			return nil
		}
		ob := setup(t, db, core.Config{Manual: true, Outboxes: map[string]core.OutboxConfig{"orders": {Relay: rec}}})
		first = publish(t, ob, db.DB, event{Group: "A", Seq: 1}, event{Group: "A", Seq: 2})[0].ID
		res, err := ob.Drain(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		if res != (core.DrainResult{Delivered: 1, Dead: 1}) {
			t.Errorf("Drain = %+v, want the first dead and the second delivered", res)
		}
		dead, _ := ob.ListDead(ctx, "orders", 0)
		if len(dead) != 1 || dead[0].Attempts != 1 || dead[0].LastError != "too large" {
			t.Errorf("dead = %+v", dead)
		}
	})
}

func TestOrderingTotalAndNone(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		var bad atomic.Int64
		total := &recorder{coretest.Recorder{Fail: poison(&bad), Ordering: core.OrderTotal}}
		none := &recorder{coretest.Recorder{Fail: poison(&bad), Ordering: core.OrderNone}}
		ob := setup(t, db, core.Config{Manual: true, Outboxes: map[string]core.OutboxConfig{
			"total": {Relay: total, Ordering: core.OrderTotal},
			"none":  {Relay: none, Ordering: core.OrderNone, Partitions: 3},
		}})
		for _, box := range []string{"total", "none"} {
			envs := publish(t, ob, db.DB, event{Box: box, Group: "A", Seq: 1}, event{Box: box, Group: "B", Seq: 2},
				event{Box: box, Seq: 3}, event{Box: box, Group: "A", Seq: 4})
			bad.Store(envs[1].ID) // B fails
			if _, err := ob.Drain(ctx, box); err != nil {
				t.Fatal(err)
			}
		}
		// Total: B's failure holds back everything behind it, whatever the group.
		if got := total.delivered(); len(got) != 1 || got[0].GroupKey != "A" {
			t.Errorf("total delivered %+v, want only the first", got)
		}
		// None: nothing waits for B.
		if got := none.delivered(); len(got) != 3 {
			t.Errorf("none delivered %d, want 3", len(got))
		}
		if _, err := core.New(core.Config{DB: db.DB, Outboxes: map[string]core.OutboxConfig{"t": {Relay: total, Ordering: core.OrderTotal, Partitions: 2}}}); !errors.Is(err, core.ErrInvalidConfig) {
			t.Errorf("total with 2 partitions: %v", err)
		}
	})
}

func TestScheduledMessagesWaitAndHoldTheirGroup(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		rec := &recorder{}
		ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {Relay: rec, PollInterval: 10 * time.Millisecond}}})
		later, err := ob.Publish(ctx, db.DB, event{Group: "A", Seq: 1}, core.WithDelay(3*time.Second)) // longer than Run takes to start and deliver B, even under -race
		if err != nil {
			t.Fatal(err)
		}
		unordered, err := ob.Publish(ctx, db.DB, event{Seq: 2}, core.WithDelay(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		after := publish(t, ob, db.DB, event{Group: "A", Seq: 3}, event{Group: "B", Seq: 4})
		run(t, ob)
		eventually(t, 20*time.Second, "A1 and A3", func() bool { return len(rec.delivered()) == 3 })
		got := rec.delivered()
		// B was not held up; A3 waited for A1, which waited for its time.
		if got[0].ID != after[1].ID || got[1].ID != later.ID || got[2].ID != after[0].ID {
			t.Errorf("delivered %v %v %v, want B, then A1, then A3", got[0].ID, got[1].ID, got[2].ID)
		}
		for _, e := range got {
			if e.ID == unordered.ID {
				t.Error("a message scheduled in an hour was delivered")
			}
		}
	})
}

func TestRetentionKeepAndPrune(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		rec := &recorder{}
		var pruned atomic.Int64
		ob := setup(t, db, core.Config{
			PruneInterval: 50 * time.Millisecond,
			Hooks:         core.Hooks{OnPrune: func(e core.PruneEvent) { pruned.Add(int64(e.Count)) }},
			Outboxes: map[string]core.OutboxConfig{
				"orders": {Relay: rec, PollInterval: 10 * time.Millisecond, Retention: core.KeepFor(3 * time.Second)},
			}})
		publish(t, ob, db.DB, event{Seq: 1}, event{Seq: 2}, event{Seq: 3})
		run(t, ob)
		// Kept as delivered for three seconds, then pruned.
		eventually(t, 10*time.Second, "delivery", func() bool {
			c := counts(t, ob, "orders")
			return len(rec.delivered()) == 3 && c == (core.Counts{Delivered: 3})
		})
		eventually(t, 20*time.Second, "pruning, and OnPrune counting 3", func() bool {
			return counts(t, ob, "orders") == (core.Counts{}) && pruned.Load() == 3
		})
	})
}

func TestLostLeaseCannotConfirm(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		inside, release := make(chan struct{}), make(chan struct{})
		var calls atomic.Int64
		relay := core.RelayFunc(func(ctx context.Context, batch []core.Envelope) error {
			if calls.Add(1) == 1 {
				close(inside)
				<-release
			}
			return nil
		})
		// The thief keeps the worker's expiry: a lease long enough that the worker cannot
		// take the partition back before the counts below, however slow the machine.
		ob := setup(t, db, core.Config{LeaseDuration: 4 * time.Second, Outboxes: map[string]core.OutboxConfig{
			"orders": {Relay: relay, PollInterval: 10 * time.Millisecond}}})
		publish(t, ob, db.DB, event{Seq: 1}, event{Seq: 2})
		run(t, ob)
		<-inside
		// Another owner takes the partition while the batch is in flight.
		leases := `outboxer_messages_leases`
		if _, err := db.ExecContext(ctx, `UPDATE `+leases+` SET owner = 'thief', token = token + 1`); err != nil {
			t.Fatal(err)
		}
		close(release)
		// The stale owner's confirmation changes nothing: both messages are still pending.
		eventually(t, 10*time.Second, "the stale confirm to be refused", func() bool {
			st, _ := ob.Status(ctx, "orders")
			return len(st) == 1 && st[0].Owner == "thief"
		})
		time.Sleep(100 * time.Millisecond)
		if c := counts(t, ob, "orders"); c.Pending != 2 {
			t.Fatalf("pending = %d after a fenced-off confirm, want 2", c.Pending)
		}
		// When the thief's lease runs out, the worker takes the partition back and delivers again.
		eventually(t, 20*time.Second, "redelivery after takeover", func() bool { return counts(t, ob, "orders").Pending == 0 })
		if calls.Load() < 2 {
			t.Errorf("relay called %d times, want the batch again", calls.Load())
		}
	})
}

func TestGracefulStopReleasesPartitions(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {Relay: &recorder{}, Partitions: 3}}})
		stop := run(t, ob)
		eventually(t, 10*time.Second, "all partitions held", func() bool {
			st, _ := ob.Status(ctx, "orders")
			held := 0
			for _, p := range st {
				if p.LeaseHeld {
					held++
				}
			}
			return held == 3
		})
		stop()
		st, err := ob.Status(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range st {
			if p.LeaseHeld || p.Owner != "" {
				t.Errorf("partition %d still held by %q after stop", p.Partition, p.Owner)
			}
		}
		// Another instance takes them at once.
		rec := &recorder{}
		other := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {Relay: rec, Partitions: 3, PollInterval: 10 * time.Millisecond}}})
		publish(t, other, db.DB, event{Seq: 1})
		run(t, other)
		eventually(t, 5*time.Second, "delivery by the next instance", func() bool { return len(rec.delivered()) == 1 })
		if err := ob.Run(ctx); !errors.Is(err, core.ErrAlreadyRunning) {
			t.Errorf("second Run: %v", err)
		}
	})
}

func TestPauseAndResume(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		rec := &recorder{}
		ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {Relay: rec, Partitions: 3, PollInterval: 10 * time.Millisecond}}})
		// Paused, before it ever ran, by another node that knows of one partition only.
		admin := setup(t, db, core.Config{PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {}}})
		if err := admin.Pause(ctx, "orders"); err != nil {
			t.Fatal(err)
		}
		run(t, ob)
		publish(t, ob, db.DB, event{Seq: 1, Group: "a"}, event{Seq: 2, Group: "b"}, event{Seq: 3, Group: "c"}, event{Seq: 4})
		time.Sleep(300 * time.Millisecond) // thirty polls
		if n := len(rec.delivered()); n != 0 {
			t.Fatalf("a paused outbox delivered %d", n)
		}
		st, _ := admin.Status(ctx, "orders")
		if !st[0].Paused {
			t.Error("Status does not show the pause")
		}
		if err := ob.Resume(ctx, "orders"); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "delivery after resume", func() bool { return len(rec.delivered()) == 4 })
	})
}

func TestPartitionsChangedOnALiveBacklog(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		two := setup(t, db, core.Config{Manual: true, Outboxes: map[string]core.OutboxConfig{"orders": {Relay: &recorder{}, Partitions: 2}}})
		if _, err := two.Drain(ctx, "orders"); err != nil { // its workers own both partitions once
			t.Fatal(err)
		}
		for i := range 20 {
			publish(t, two, db.DB, event{Seq: i, Group: fmt.Sprint("g", i)})
		}
		for _, n := range []int{1, 4} {
			ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {Relay: &recorder{}, Partitions: n}}})
			bounded, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := ob.Run(bounded)
			cancel()
			if !errors.Is(err, core.ErrRepartitioned) {
				t.Errorf("%d partitions: Run = %v, want ErrRepartitioned", n, err)
			}
		}
		rec := &recorder{}
		ob := setup(t, db, core.Config{AllowRepartition: true, Outboxes: map[string]core.OutboxConfig{"orders": {Relay: rec, Partitions: 1, PollInterval: 10 * time.Millisecond}}})
		run(t, ob)
		eventually(t, 10*time.Second, "the moved backlog", func() bool { return len(rec.delivered()) == 20 })
	})
}

func TestPublishOnlyAndManualStartNothing(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		for _, cfg := range []core.Config{{PublishOnly: true}, {Manual: true}} {
			cfg.Outboxes = map[string]core.OutboxConfig{"orders": {Relay: &recorder{}}}
			if cfg.PublishOnly {
				cfg.Outboxes = map[string]core.OutboxConfig{"orders": {}} // no relay needed
			}
			ob := setup(t, db, cfg)
			publish(t, ob, db.DB, event{Seq: 1})
			stop := run(t, ob)
			time.Sleep(50 * time.Millisecond)
			st, _ := ob.Status(ctx, "orders")
			for _, p := range st {
				if p.Owner != "" {
					t.Errorf("%+v: partition owned by %q", cfg, p.Owner)
				}
			}
			stop()
			if _, err := ob.Drain(ctx, "orders"); cfg.PublishOnly && !errors.Is(err, core.ErrManualOnly) {
				t.Errorf("Drain on a publish-only instance: %v", err)
			}
		}
		if c := counts(t, setup(t, db, core.Config{}), "orders"); c.Pending != 0 {
			t.Errorf("pending = %d; the manual Drain should have delivered both", c.Pending)
		}
	})
}

type lifecycleRelay struct {
	recorder
	started, closed atomic.Int64
	startErr        error
}

func (r *lifecycleRelay) Start(context.Context) error { r.started.Add(1); return r.startErr }
func (r *lifecycleRelay) Close() error                { r.closed.Add(1); return nil }

func TestRelayLifecycleAndHooks(t *testing.T) {
	db := dbtest.SQLite(t)
	ctx := context.Background()
	r := &lifecycleRelay{}
	var mu sync.Mutex
	var events []string
	note := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
	ob := setup(t, db, core.Config{
		Name: "shop",
		Hooks: core.Hooks{
			OnPublish:    func(e core.PublishEvent) { note(fmt.Sprintf("publish %s %v %d", e.Name, e.Outboxes, e.Count)) },
			OnBatchStart: func(e core.BatchEvent) { note(fmt.Sprintf("start %s %d %d", e.Outbox, e.Partition, e.Count)) },
			OnBatchStop: func(e core.BatchEvent) {
				note(fmt.Sprintf("stop %s delivered=%d failed=%d dead=%d", e.Outbox, e.Delivered, e.Failed, e.Dead))
			},
			OnRetry: func(e core.MessageEvent) { note(fmt.Sprintf("retry %d %s %v", e.Attempt, e.GroupKey, e.Err)) },
		},
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: r, PollInterval: 10 * time.Millisecond, Backoff: fast}}})
	// The batch fails, and so does the first half the engine narrows it to: A's first
	// message is charged, its second waits behind it.
	fails := 0
	r.Fail = func(batch []core.Envelope) error {
		if fails < 2 {
			fails++
			return errors.New("down")
		}
		return nil
	}
	publish(t, ob, db.DB, event{Group: "A", Seq: 1}, event{Group: "A", Seq: 2})
	stop := run(t, ob)
	eventually(t, 10*time.Second, "delivery", func() bool { return len(r.delivered()) == 2 })
	stop()
	if r.started.Load() != 1 || r.closed.Load() != 1 {
		t.Errorf("Start called %d, Close %d times; want 1 each", r.started.Load(), r.closed.Load())
	}
	mu.Lock()
	got := slices.Clone(events)
	mu.Unlock()
	want := []string{
		"publish shop [orders] 2",
		"start orders 0 2", "retry 1 A down", "stop orders delivered=0 failed=1 dead=0",
		"start orders 0 2", "stop orders delivered=2 failed=0 dead=0",
	}
	// Or: the retried message goes first while its group's next one is held, and that one
	// follows in a batch of its own once the first is delivered.
	held := append(slices.Clone(want[:4]),
		"start orders 0 1", "stop orders delivered=1 failed=0 dead=0",
		"start orders 0 1", "stop orders delivered=1 failed=0 dead=0")
	if !slices.Equal(got, want) && !slices.Equal(got, held) {
		t.Errorf("events:\n%q\nwant\n%q\nor\n%q", got, want, held)
	}
	// A relay that cannot start: Run tries again until its context ends, and says why.
	bad := &lifecycleRelay{startErr: errors.New("no broker")}
	ob2 := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {Relay: bad}}})
	// It is stopped once Start has failed twice (not at a fixed time: under load the
	// start-up's own statements can take longer than any short deadline).
	short, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for bad.started.Load() < 2 && short.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	if err := ob2.Run(short); !errors.Is(err, bad.startErr) || !errors.Is(err, context.Canceled) {
		t.Errorf("Run with a failing Start: %v", err)
	}
	// A Start error marked Permanent fails Run at once.
	worse := &lifecycleRelay{startErr: core.Permanent(errors.New("no such topic"))}
	ob3 := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {Relay: worse}}})
	if err := ob3.Run(ctx); !errors.Is(err, worse.startErr) {
		t.Errorf("Run with a failing Start: %v", err)
	}
}

func TestRelayPanicIsAFailure(t *testing.T) {
	db := dbtest.SQLite(t)
	calls := 0
	relay := core.RelayFunc(func(ctx context.Context, batch []core.Envelope) error {
		calls++
		if calls == 1 {
			panic("relay bug")
		}
		return nil
	})
	ob := setup(t, db, core.Config{Manual: true, Outboxes: map[string]core.OutboxConfig{"orders": {Relay: relay, Backoff: fast}}})
	publish(t, ob, db.DB, event{Seq: 1})
	res, err := ob.Drain(context.Background(), "orders")
	if err != nil || res.Failed != 1 {
		t.Fatalf("Drain = %+v, %v; want one failure", res, err)
	}
	p, _ := ob.ListPending(context.Background(), "orders", 1)
	if len(p) != 1 || p[0].LastError != "relay panicked: relay bug" {
		t.Errorf("pending = %+v", p)
	}
	time.Sleep(5 * time.Millisecond)
	if res, err := ob.Drain(context.Background(), "orders"); err != nil || res.Delivered != 1 {
		t.Errorf("second Drain = %+v, %v", res, err)
	}
}

func TestPublishWakesTheWorkers(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		rec := &recorder{}
		// A poll interval of a minute: only a wake-up can deliver within the test.
		ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {Relay: rec, Partitions: 2, PollInterval: time.Minute}}})
		run(t, ob)
		time.Sleep(100 * time.Millisecond) // let the workers take their partitions and go idle
		publish(t, ob, db.DB, event{Seq: 1, Group: "a"})
		eventually(t, 10*time.Second, "delivery after a plain publish", func() bool { return len(rec.delivered()) == 1 })
		if err := ob.InTx(ctx, db.DB, func(tx *sql.Tx, p *core.TxPublisher) error {
			_, err := p.Publish(ctx, event{Seq: 2, Group: "b"})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "delivery after InTx", func() bool { return len(rec.delivered()) == 2 })
		// A transaction committed later is still found: Publish hints the workers, which
		// look again shortly.
		tx, _ := db.BeginTx(ctx, nil)
		if _, err := ob.Publish(ctx, tx, event{Seq: 3, Group: "c"}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "delivery after a committed transaction", func() bool { return len(rec.delivered()) == 3 })
	})
}

// With autovacuum off (as on this project's servers), Run vacuums the message table, so
// the space of delivered messages is reused and the table does not grow under load.
func TestRunVacuumsTheMessageTable(t *testing.T) {
	db := dbtest.Postgres(t)
	ctx := context.Background()
	rec := &recorder{}
	ob := setup(t, db, core.Config{VacuumInterval: 100 * time.Millisecond, Outboxes: map[string]core.OutboxConfig{"orders": {
		Relay: rec, PollInterval: 10 * time.Millisecond,
	}}})
	run(t, ob)
	deadTuples := func() int64 {
		var n int64
		if err := db.QueryRowContext(ctx, `SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'outboxer_messages' AND schemaname = $1`, db.Schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	msgs := make([]core.Message, 500)
	for i := range msgs {
		msgs[i] = event{Seq: i, Group: fmt.Sprint("g", i%5)}
	}
	publish(t, ob, db.DB, msgs...)
	eventually(t, 20*time.Second, "delivery", func() bool { return counts(t, ob, "orders").Pending == 0 })
	// The 500 deleted rows are dead tuples until a vacuum; the statistics lag a little.
	eventually(t, 20*time.Second, "a vacuum of the delivered rows", func() bool {
		var vacuums int64
		_ = db.QueryRowContext(ctx, `SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'outboxer_messages' AND schemaname = $1`, db.Schema).Scan(&vacuums)
		return vacuums > 0 && deadTuples() == 0
	})
}

// Rows set aside behind a waiting message of their group leave garbage in the index every
// fetch reads (PostgreSQL); once 1,000 or more were set aside, Run vacuums the table when
// the set-aside is over, whatever VacuumInterval says (here: too long to be the cause).
func TestRunVacuumsAfterASetAside(t *testing.T) {
	db := dbtest.Postgres(t)
	ctx := context.Background()
	rec := &recorder{}
	rec.Fail = func(batch []core.Envelope) error {
		return &core.PartialFailure{Failed: map[int64]error{batch[0].ID: errors.New("poison")}}
	}
	ob := setup(t, db, core.Config{VacuumInterval: time.Hour, Outboxes: map[string]core.OutboxConfig{"orders": {
		Relay: rec, PollInterval: 10 * time.Millisecond,
		Backoff: core.Backoff{Func: func(int) time.Duration { return time.Hour }},
	}}})
	vacuums := func() int64 {
		var n int64
		if err := db.QueryRowContext(ctx, `SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'outboxer_messages' AND schemaname = $1`, db.Schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := vacuums()
	msgs := make([]core.Message, 1500)
	for i := range msgs {
		msgs[i] = event{Seq: i, Group: "poison"}
	}
	publish(t, ob, db.DB, msgs...)
	run(t, ob)
	// The head fails and waits an hour; the 1,499 behind it are set aside, then vacuumed.
	eventually(t, 30*time.Second, "the group set aside, then a vacuum", func() bool {
		var ready int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+db.Schema+`.outboxer_messages WHERE state = 0`).Scan(&ready); err != nil {
			t.Fatal(err)
		}
		return ready == 0 && vacuums() > before
	})
	if n := len(rec.delivered()); n != 0 {
		t.Errorf("%d messages delivered past the failing head of their group", n)
	}
}

// Several instances live in one process without sharing anything: each delivers its own
// table with its own relay.
func TestSeveralInstancesInOneProcess(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		shop, billing := &recorder{}, &recorder{}
		a := setup(t, db, core.Config{Name: "shop", Table: "shop_outbox", Outboxes: map[string]core.OutboxConfig{
			"orders": {Relay: shop, PollInterval: 10 * time.Millisecond}}})
		b := setup(t, db, core.Config{Name: "billing", Table: "billing_outbox", Outboxes: map[string]core.OutboxConfig{
			"orders": {Relay: billing, PollInterval: 10 * time.Millisecond}}})
		run(t, a)
		run(t, b)
		publish(t, a, db.DB, event{Seq: 1}, event{Seq: 2})
		publish(t, b, db.DB, event{Seq: 3})
		eventually(t, 10*time.Second, "both instances' deliveries", func() bool {
			return len(shop.delivered()) == 2 && len(billing.delivered()) == 1
		})
		if got := string(billing.delivered()[0].Payload); got != `{"seq":3}` {
			t.Errorf("billing delivered %s", got)
		}
	})
}

// A pause from another node stops a worker that is busy with a backlog, within a quarter
// of the lease, and a resume starts it again.
func TestPauseStopsABusyWorker(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		rec := &recorder{}
		rec.Fail = func([]core.Envelope) error { time.Sleep(2 * time.Millisecond); return nil }
		ob := setup(t, db, core.Config{LeaseDuration: 2 * time.Second, Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: rec, BatchSize: 5, PollInterval: 10 * time.Millisecond}}})
		msgs := make([]core.Message, 3000)
		for i := range msgs {
			msgs[i] = event{Seq: i, Group: fmt.Sprint("g", i%7)}
		}
		publish(t, ob, db.DB, msgs...)
		run(t, ob)
		eventually(t, 10*time.Second, "the worker busy", func() bool { return len(rec.delivered()) > 50 })
		admin := setup(t, db, core.Config{PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {}}})
		if err := admin.Pause(ctx, "orders"); err != nil {
			t.Fatal(err)
		}
		// The worker notices within a quarter lease (500ms) and its batch in flight ends:
		// then nothing more arrives for a while, long before the backlog is done.
		last, since := len(rec.delivered()), time.Now()
		eventually(t, 20*time.Second, "delivery to stop", func() bool {
			if n := len(rec.delivered()); n != last {
				last, since = n, time.Now()
			}
			return time.Since(since) > 700*time.Millisecond
		})
		if last == len(msgs) {
			t.Fatal("the whole backlog was delivered: the pause did not stop the worker")
		}
		if err := admin.Resume(ctx, "orders"); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "the rest after the resume", func() bool { return len(rec.delivered()) == len(msgs) })
	})
}

// Stopping Run lets the batch in flight finish within ShutdownTimeout and confirms it; a
// delivery that outlasts the timeout is cancelled and its messages stay pending.
func TestShutdownFinishesTheBatchInFlight(t *testing.T) {
	for _, slow := range []bool{false, true} {
		t.Run(fmt.Sprint("outlasting=", slow), func(t *testing.T) {
			db := dbtest.SQLite(t)
			inside := make(chan struct{})
			relay := core.RelayFunc(func(ctx context.Context, batch []core.Envelope) error {
				close(inside)
				if slow {
					<-ctx.Done() // only the shutdown timeout ends it
					return ctx.Err()
				}
				time.Sleep(200 * time.Millisecond) // still running when Run is stopped
				return nil
			})
			timeout := 2 * time.Second
			if slow {
				timeout = 100 * time.Millisecond
			}
			ob := setup(t, db, core.Config{ShutdownTimeout: timeout, Outboxes: map[string]core.OutboxConfig{
				"orders": {Relay: relay, PollInterval: 10 * time.Millisecond}}})
			publish(t, ob, db.DB, event{Seq: 1})
			stop := run(t, ob)
			<-inside
			began := time.Now()
			stop() // waits for Run to return
			c := counts(t, ob, "orders")
			if slow {
				if c.Pending != 1 || time.Since(began) > 5*time.Second {
					t.Errorf("cancelled delivery: pending %d after %v, want 1 within the timeout", c.Pending, time.Since(began))
				}
			} else if c.Pending != 0 {
				t.Errorf("the batch in flight was not confirmed at shutdown: pending %d", c.Pending)
			}
		})
	}
}
