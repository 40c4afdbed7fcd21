package dbtest_test

// Reliability scenario 13: blocked and scheduled backlogs. Messages that cannot go now (a
// scheduled backlog, each message in its own group, and a poisoned group's backlog behind
// its failing head) must cost the fetch nothing: ready messages of other groups flow as
// fast as without them. Before the fetch read ready rows only, 5,000 scheduled messages
// made 100 ready ones take 12.8 s (PostgreSQL), 96 s (MariaDB), 143 s (SQLite) instead
// of milliseconds.
//
// The check is not a clock (load on the machine would break it): it is that none of the
// backlog is a row a fetch reads. A fetch reads ready rows (state 0) only, in ID order,
// so while the backlogs wait the ready rows must be at most the poisoned head (when its
// retry is due). The times, without and with the backlogs, go to the scoreboard.

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

func TestChaosBacklogsDoNotSlowReadyMessages(t *testing.T) {
	sizes := []int{2000}
	if dbtest.Long() {
		sizes = []int{10000, 100000 * dbtest.ChaosScale()}
	}
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		for _, size := range sizes {
			t.Run(fmt.Sprint(size), func(t *testing.T) { testBacklogs(t, db, size) })
		}
	})
}

// testBacklogs delivers 100 ready messages, then puts size scheduled messages and a
// poisoned group of size messages in the table, and delivers 100 ready messages again.
func testBacklogs(t *testing.T, db *dbtest.DB, size int) {
	ctx := context.Background()
	const ready = 100
	rec := &timedRecorder{seen: map[int64]time.Time{}}
	rec.Fail = func(batch []core.Envelope) error {
		for _, e := range batch {
			if e.GroupKey == "poison" {
				return &core.PartialFailure{Failed: map[int64]error{e.ID: errors.New("poison")}}
			}
		}
		return nil
	}
	// A table of its own per size: the backlogs of a run must not stay for the next one.
	table := fmt.Sprintf("backlog_%d", size)
	ob := setup(t, db, core.Config{Table: table, Outboxes: map[string]core.OutboxConfig{"orders": {
		Relay: rec, BatchSize: 100, PollInterval: 20 * time.Millisecond,
		Backoff: core.Backoff{Func: func(int) time.Duration { return 50 * time.Millisecond }},
	}}})
	run(t, ob)
	wait := 2 * time.Minute
	if dbtest.Long() {
		wait = 30 * time.Minute
	}
	score := dbtest.Score{Scenario: "13 blocked and scheduled backlogs", Database: chaosScore(db),
		Variant: fmt.Sprintf("%d ready past %d scheduled and %d behind a poison", ready, size, size)}
	defer func() { dbtest.Record(t, score) }()

	// deliver publishes the ready messages one statement each, as a service would, and
	// waits until all are delivered and confirmed (pending back to backlog). It returns
	// how long the messages waited, publish to relay: the median and the longest.
	var published []core.Envelope
	deliver := func(round string, backlog int64) (median, longest time.Duration) {
		var waited []time.Duration
		for i := range ready {
			before := time.Now()
			envs := publish(t, ob, db.DB, event{Seq: i, Group: fmt.Sprintf("%s:%d", round, i)})
			published = append(published, envs...)
			at := rec.at(envs[0].ID, wait)
			if at.IsZero() {
				t.Fatalf("message %d of the %s ones not delivered within %v", i, round, wait)
			}
			waited = append(waited, at.Sub(before))
		}
		score.Published += ready
		score.Committed += ready
		eventually(t, wait, fmt.Sprintf("the %d %s messages confirmed", ready, round), func() bool {
			return counts(t, ob, "orders").Pending == backlog
		})
		slices.Sort(waited)
		return waited[len(waited)/2], waited[len(waited)-1]
	}
	medianWithout, longestWithout := deliver("before", 0)

	// The backlogs: a poisoned group, and messages scheduled for tomorrow, one group each.
	for from := 0; from < size; from += 2000 {
		n := min(2000, size-from)
		poisoned, scheduled := make([]core.Message, n), make([]core.Message, n)
		for i := range n {
			poisoned[i] = event{Seq: from + i, Group: "poison"}
			scheduled[i] = event{Seq: from + i, Group: fmt.Sprintf("later:%d", from+i)}
		}
		publish(t, ob, db.DB, poisoned...)
		if _, err := ob.PublishAll(ctx, db.DB, scheduled, core.WithDelay(24*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	// The poisoned head is tried again and again, and its group set aside behind it.
	readable := func() int {
		var n int
		q := chaosQ(db, `SELECT COUNT(*) FROM `+table+` WHERE outbox = ? AND state = 0`)
		if err := db.QueryRowContext(ctx, q, "orders").Scan(&n); err != nil {
			t.Fatalf("count ready rows: %v", err)
		}
		return n
	}
	eventually(t, wait, "the poisoned head tried twice, its group set aside", func() bool {
		l, err := ob.ListPending(ctx, "orders", 1)
		return err == nil && len(l) == 1 && l[0].Attempts >= 2 && readable() <= 1
	})
	// PostgreSQL: setting the group aside left an index entry per held row in the index of
	// ready rows, dead but there until a VACUUM, and every fetch steps over them (100,000
	// of them made a ready message wait 3.8 times as long). Run vacuums the table once the
	// set-aside is over; the ready messages go after it did.
	vacuumed := ""
	if db.Dialect == core.Postgres {
		settled := time.Now().Add(2 * time.Second) // past the quiet time Run waits for
		eventually(t, wait, "Run's vacuum after the set-aside", func() bool {
			var vacuums, running int64
			q := `SELECT (SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = $1 AND schemaname = $2),
				(SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query ILIKE 'VACUUM %' || $1 || '%' AND pid <> pg_backend_pid())`
			if err := db.QueryRowContext(ctx, q, table, db.Schema).Scan(&vacuums, &running); err != nil {
				t.Fatalf("read the vacuum statistics: %v", err)
			}
			return time.Now().After(settled) && vacuums > 0 && running == 0
		})
		vacuumed = " (after the VACUUM Run makes once a set-aside is over)"
	}
	medianWith, longestWith := deliver("after", int64(2*size))
	// Checked after the ready messages went: the backlogs are still out of the fetch's way.
	if n := readable(); n > 1 {
		t.Errorf("%d rows a fetch reads while the backlogs wait, want at most the poisoned head", n)
	}

	got := rec.delivered()
	if len(got) != len(published) {
		t.Errorf("delivered %d, want the %d ready ones only", len(got), len(published))
	}
	checkGroupOrder(t, published, got)
	deliveries := make([]dbtest.Delivery, len(got))
	for i, e := range got {
		deliveries[i] = dbtest.Delivery{ID: e.ID, GroupKey: e.GroupKey}
	}
	committed := make(map[int64]string, len(published))
	for _, e := range published {
		committed[e.ID] = e.GroupKey
	}
	score = dbtest.Tally(score, committed, deliveries)
	ms := func(d time.Duration) string { return d.Round(100 * time.Microsecond).String() }
	ratio := float64(medianWith) / float64(medianWithout)
	score.Notes = fmt.Sprintf("a ready message waited %s (longest %s) without the backlogs, %s (longest %s) with them%s: %.1f× (within 2×: %v); the fetch reads none of the %d waiting rows",
		ms(medianWithout), ms(longestWithout), ms(medianWith), ms(longestWith), vacuumed, ratio, ratio <= 2, 2*size)
	t.Log(score.Notes)
}

// timedRecorder is a recorder that notes when each message was first handed to it.
type timedRecorder struct {
	recorder
	mu   sync.Mutex
	seen map[int64]time.Time
}

func (r *timedRecorder) Deliver(ctx context.Context, batch []core.Envelope) error {
	now := time.Now()
	r.mu.Lock()
	for _, e := range batch {
		if _, ok := r.seen[e.ID]; !ok {
			r.seen[e.ID] = now
		}
	}
	r.mu.Unlock()
	return r.recorder.Deliver(ctx, batch)
}

// at waits up to within for message id and returns when it was first handed over
// (zero if it was not).
func (r *timedRecorder) at(id int64, within time.Duration) time.Time {
	deadline := time.Now().Add(within)
	for {
		r.mu.Lock()
		at, ok := r.seen[id]
		r.mu.Unlock()
		if ok || time.Now().After(deadline) {
			return at
		}
		time.Sleep(time.Millisecond)
	}
}
