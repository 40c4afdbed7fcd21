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

// TestSetAsideLetsOtherGroupsThrough blocks a group with 100,000 messages behind its
// head, then publishes 3,000 messages of 300 other groups. Their first batch must not
// wait for the set-aside: when it reaches the relay, less than half of the blocked
// group's backlog may be held (a fetch that read the partition in ID order held all of
// it first). Every message of the other groups then goes once, in order per group, and
// none of the blocked group. How long the other groups take, against the same run with
// nothing behind the head, is BenchmarkSetAside's.
func TestSetAsideLetsOtherGroupsThrough(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		t.Parallel()
		const backlog = 100000
		var (
			first  = make(chan struct{})
			resume = make(chan struct{})
			once   sync.Once
		)
		b := newBlocked(t, db, "aside_first", backlog, func(batch []core.Envelope) {
			if batch[0].GroupKey != "poison" {
				once.Do(func() { close(first); <-resume })
			}
		})
		b.round(t, 0)
		select {
		case <-first:
		case <-time.After(2 * time.Minute):
			t.Fatal("no message of the other groups reached the relay within two minutes")
		}
		var held int
		q := chaosQ(db, `SELECT COUNT(*) FROM aside_first WHERE group_key = ? AND state = 4`)
		err := db.QueryRowContext(context.Background(), q, "poison").Scan(&held)
		close(resume)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d of the %d messages behind the blocked head held when the other groups' first batch went", held, backlog)
		if held >= backlog/2 {
			t.Errorf("the other groups' first batch went after %d of the %d messages behind the blocked head were held, want fewer than half", held, backlog)
		}
		b.wait(t)
		b.check(t)
	})
}

// BenchmarkSetAside times rounds of 3,000 messages of 300 other groups, published from
// the moment a group blocks with a backlog behind its head, on each database, with
// nothing, 100,000 and 1,000,000 messages behind the head: a round with a backlog should
// take at most twice (plus 100 ms) the round without. first-ms is the first round, which
// starts at the moment the group blocked. The 1,000,000 backlog takes minutes to publish.
//
//	cd dbtest && go test -run '^$' -bench BenchmarkSetAside -benchtime 3x .
func BenchmarkSetAside(b *testing.B) {
	for _, d := range dbtest.Dialects {
		for _, backlog := range []int{0, 100000, 1000000} {
			b.Run(fmt.Sprintf("%s/behind-%d", d, backlog), func(b *testing.B) {
				db := dbtest.Open(b, d)
				bl := newBlocked(b, db, fmt.Sprintf("aside_bench_%d", backlog), backlog, nil)
				start := time.Now()
				var firstRound time.Duration
				r := 0
				for b.Loop() {
					bl.round(b, r)
					bl.wait(b)
					if r == 0 {
						firstRound = time.Since(start)
					}
					r++
				}
				b.ReportMetric(float64(firstRound.Microseconds())/1000, "first-ms")
				bl.check(b)
			})
		}
	}
}

// blocked is an outbox (one partition) whose group "poison" blocks: its head fails and
// waits an hour for its retry, with backlog messages of its group behind it. Rounds of
// 3,000 messages of 300 other groups go through it meanwhile.
type blocked struct {
	db        *dbtest.DB
	ob        *core.Outboxer
	rec       *recorder
	published []core.Envelope
}

// newBlocked publishes the head and the backlog, runs the outbox and returns once the
// head has failed. seen, when not nil, is called with each batch, before it is recorded.
func newBlocked(t testing.TB, db *dbtest.DB, table string, backlog int, seen func([]core.Envelope)) *blocked {
	t.Helper()
	blockedCh := make(chan struct{})
	var once sync.Once
	rec := &recorder{}
	rec.Fail = func(batch []core.Envelope) error {
		if seen != nil {
			seen(batch)
		}
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
				once.Do(func() { close(blockedCh) })
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
	run(t, ob)
	select {
	case <-blockedCh:
	case <-time.After(time.Minute):
		t.Fatal("the poisoned head did not fail within a minute")
	}
	return &blocked{db: db, ob: ob, rec: rec}
}

// round publishes 3,000 messages of 300 other groups, 100 a statement.
func (b *blocked) round(t testing.TB, r int) {
	t.Helper()
	const others, groups = 3000, 300
	for from := 0; from < others; from += 100 {
		msgs := make([]core.Message, 100)
		for i := range msgs {
			msgs[i] = event{Seq: from + i, Group: fmt.Sprintf("other:%d:%d", r, (from+i)%groups)}
		}
		envs, err := b.ob.PublishAll(context.Background(), b.db.DB, msgs)
		if err != nil {
			t.Fatal(err)
		}
		b.published = append(b.published, envs...)
	}
}

// wait waits until every message of the rounds so far is delivered.
func (b *blocked) wait(t testing.TB) {
	t.Helper()
	eventually(t, 2*time.Minute, "the other groups' messages delivered", func() bool { return len(b.rec.delivered()) >= len(b.published) })
}

// check checks that every message of the other groups was delivered once, in order per
// group, and none of the poisoned group.
func (b *blocked) check(t testing.TB) {
	t.Helper()
	got := b.rec.delivered()
	if len(got) != len(b.published) {
		t.Errorf("delivered %d messages, want the %d of the other groups", len(got), len(b.published))
	}
	for _, e := range got {
		if e.GroupKey == "poison" {
			t.Fatalf("delivered message %d of the poisoned group, behind its failing head", e.ID)
		}
	}
	checkGroupOrder(t, b.published, got)
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
