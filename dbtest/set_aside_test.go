package dbtest_test

// Setting a blocked group aside. When a group's head fails, the rest of its group waits
// behind it, and the worker sets those rows aside (holds them). However large the group,
// the other groups of the partition must not wait for that: their ready messages are
// fetched and delivered while the set-aside goes on.

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

// TestSetAsideLetsOtherGroupsThrough times rounds of 3,000 messages of 300 other groups
// published from the moment a poisoned group blocks, with 100,000 messages behind its
// head and with none, in the same run. With the backlog they must go within twice the
// time (plus 100 ms) they take without it; the median of three rounds each, the first
// from the moment the group blocked, so that one stall of the machine is not taken for
// the engine's. Not parallel: it compares timings, and the other databases' runs beside
// it would make them noise.
func TestSetAsideLetsOtherGroupsThrough(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		const backlog = 100000
		without := blockedRounds(t, db, "aside_ref", 0)
		with := blockedRounds(t, db, "aside_backlog", backlog)
		ms := func(ds []time.Duration) []time.Duration {
			out := make([]time.Duration, len(ds))
			for i, d := range ds {
				out[i] = d.Round(time.Millisecond)
			}
			return out
		}
		median := func(ds []time.Duration) time.Duration {
			ds = slices.Clone(ds)
			slices.Sort(ds)
			return ds[len(ds)/2]
		}
		w, b := median(without), median(with)
		t.Logf("rounds of 3000 messages of other groups from the moment their partition's group blocked: %v with nothing behind its head, %v with %d behind it (medians %v and %v: %.1f×)",
			ms(without), ms(with), backlog, w.Round(time.Millisecond), b.Round(time.Millisecond), float64(b)/float64(w))
		if limit := 2*w + 100*time.Millisecond; b > limit {
			t.Errorf("with %d messages behind the blocked head, the other groups took %v (median of %v), want at most %v (2× %v + 100 ms)",
				backlog, b.Round(time.Millisecond), ms(with), limit.Round(time.Millisecond), w.Round(time.Millisecond))
		}
	})
}

// blockedRounds publishes a poisoned head and backlog messages of its group, runs the
// outbox (one partition) until the head has failed, then, three times, publishes 3,000
// messages of 300 other groups, 100 a statement, and waits until they are delivered. It
// returns how long each round took, the first counted from the moment the head failed.
// It checks that every message of the other groups was delivered once, in order per
// group, and none of the poisoned group.
func blockedRounds(t *testing.T, db *dbtest.DB, table string, backlog int) []time.Duration {
	t.Helper()
	ctx := context.Background()
	const (
		rounds = 3
		others = 3000
		groups = 300
	)
	blocked := make(chan struct{})
	var once sync.Once
	rec := &recorder{}
	rec.Fail = func(batch []core.Envelope) error {
		for _, e := range batch {
			if e.GroupKey == "poison" {
				return &core.PartialFailure{Failed: map[int64]error{e.ID: errors.New("poison")}}
			}
		}
		return nil
	}
	ob := setup(t, db, core.Config{Table: table,
		Hooks: core.Hooks{OnRetry: func(e core.MessageEvent) {
			if e.GroupKey == "poison" {
				once.Do(func() { close(blocked) })
			}
		}},
		Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: rec, BatchSize: 100, PollInterval: 20 * time.Millisecond,
			// The head waits for its retry for the whole test: its group stays blocked.
			Backoff: core.Backoff{Func: func(int) time.Duration { return time.Hour }},
		}}})
	publish(t, ob, db.DB, event{Seq: 0, Group: "poison"})
	for from := 0; from < backlog; from += 2000 {
		msgs := make([]core.Message, min(2000, backlog-from))
		for i := range msgs {
			msgs[i] = event{Seq: from + i + 1, Group: "poison"}
		}
		publish(t, ob, db.DB, msgs...)
	}
	stop := run(t, ob)
	defer stop()
	select {
	case <-blocked:
	case <-time.After(time.Minute):
		t.Fatal("the poisoned head did not fail within a minute")
	}
	start := time.Now()
	var (
		took      []time.Duration
		published []core.Envelope
	)
	for r := range rounds {
		for from := 0; from < others; from += 100 {
			msgs := make([]core.Message, 100)
			for i := range msgs {
				msgs[i] = event{Seq: from + i, Group: fmt.Sprintf("other:%d:%d", r, (from+i)%groups)}
			}
			envs, err := ob.PublishAll(ctx, db.DB, msgs)
			if err != nil {
				t.Fatal(err)
			}
			published = append(published, envs...)
		}
		eventually(t, 2*time.Minute, "the other groups' messages delivered", func() bool { return len(rec.delivered()) >= len(published) })
		took = append(took, time.Since(start))
		start = time.Now()
	}
	got := rec.delivered()
	if len(got) != len(published) {
		t.Errorf("delivered %d messages, want the %d of the other groups", len(got), len(published))
	}
	for _, e := range got {
		if e.GroupKey == "poison" {
			t.Fatalf("delivered message %d of the poisoned group, behind its failing head", e.ID)
		}
	}
	checkGroupOrder(t, published, got)
	return took
}

// TestSetAsideKeepsOrderAndReleases sets a poisoned group aside whose backlog has
// messages of other groups between its own, and more of those groups after it: each of
// them must go in order (the ones after it wait for the ones among it), and once the
// head is out of the way, by a discard or by a retry that goes through, every message
// behind it goes, in order, none lost and none twice.
func TestSetAsideKeepsOrderAndReleases(t *testing.T) {
	for _, how := range []string{"discard", "retry"} {
		t.Run(how, func(t *testing.T) {
			dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
				t.Parallel()
				testSetAsideRelease(t, db, how)
			})
		})
	}
}

func testSetAsideRelease(t *testing.T, db *dbtest.DB, how string) {
	ctx := context.Background()
	const (
		backlog = 6000 // of the poisoned group, in runs of 500
		mixed   = 20   // groups whose messages sit between the runs, and after them
	)
	var (
		mu      sync.Mutex
		poison  int64 // the head, failing until the retry case lets it through
		blocked = make(chan struct{})
		once    sync.Once
	)
	rec := &recorder{}
	rec.Fail = func(batch []core.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range batch {
			if e.ID == poison {
				return &core.PartialFailure{Failed: map[int64]error{e.ID: errors.New("poison")}}
			}
		}
		return nil
	}
	backoff := time.Hour // discard: the head waits until it is discarded
	if how == "retry" {
		backoff = 300 * time.Millisecond
	}
	ob := setup(t, db, core.Config{Table: "aside_release",
		Hooks: core.Hooks{OnRetry: func(e core.MessageEvent) {
			if e.GroupKey == "poison" {
				once.Do(func() { close(blocked) })
			}
		}},
		Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: rec, BatchSize: 100, PollInterval: 20 * time.Millisecond,
			Backoff: core.Backoff{Func: func(int) time.Duration { return backoff }},
		}}})
	var published []core.Envelope
	head := publish(t, ob, db.DB, event{Seq: 0, Group: "poison"})
	published = append(published, head...)
	mu.Lock()
	poison = head[0].ID
	mu.Unlock()
	seq := 1
	mix := func(round int) {
		msgs := make([]core.Message, mixed)
		for i := range msgs {
			msgs[i] = event{Seq: round, Group: fmt.Sprintf("mixed:%d", i)}
		}
		published = append(published, publish(t, ob, db.DB, msgs...)...)
	}
	for from := 0; from < backlog; from += 500 {
		msgs := make([]core.Message, 500)
		for i := range msgs {
			msgs[i] = event{Seq: seq, Group: "poison"}
			seq++
		}
		published = append(published, publish(t, ob, db.DB, msgs...)...)
		mix(from)
	}
	run(t, ob)
	select {
	case <-blocked:
	case <-time.After(time.Minute):
		t.Fatal("the poisoned head did not fail within a minute")
	}
	// More of the mixed groups, and of the poisoned one, after the group blocked.
	for round := range 5 {
		mix(backlog + round)
		published = append(published, publish(t, ob, db.DB, event{Seq: seq, Group: "poison"})...)
		seq++
	}
	others := 0
	for _, e := range published {
		if e.GroupKey != "poison" {
			others++
		}
	}
	notPoison := func() int {
		n := 0
		for _, e := range rec.delivered() {
			if e.GroupKey != "poison" {
				n++
			}
		}
		return n
	}
	eventually(t, 2*time.Minute, "the other groups' messages delivered", func() bool { return notPoison() == others })
	for _, e := range rec.delivered() {
		if e.GroupKey == "poison" {
			t.Fatalf("message %d of the poisoned group delivered while its head fails", e.ID)
		}
	}
	switch how {
	case "discard":
		if n, err := ob.Discard(ctx, "orders", head[0].ID); err != nil || n != 1 {
			t.Fatalf("Discard(%d) = %d, %v; want 1, nil", head[0].ID, n, err)
		}
		published = slices.DeleteFunc(published, func(e core.Envelope) bool { return e.ID == head[0].ID })
	case "retry":
		mu.Lock()
		poison = 0
		mu.Unlock()
	}
	eventually(t, 2*time.Minute, "every message delivered", func() bool { return counts(t, ob, "orders").Pending == 0 })
	got := rec.delivered()
	if len(got) != len(published) {
		t.Errorf("delivered %d messages, want the %d published", len(got), len(published))
	}
	checkGroupOrder(t, published, got)
}
