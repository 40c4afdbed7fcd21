package dbtest_test

// Reliability scenario 11: unreadable rows. A service not written in Go inserts rows
// whose headers the engine cannot read among readable ones: each goes dead alone, with
// the reason, and every other message of its partition (and of its group) flows.
//
// Reliability scenario 16: partition count changes. Publishers configured with other
// counts publish while relays with changing counts come and go: a relay with another
// count is refused while one with the recorded count runs, the count changes once they
// stopped and the backlog drained, and nothing is lost, stranded or reordered.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

func TestChaosUnreadableRows(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		score := dbtest.Score{Scenario: "11 unreadable rows", Database: chaosScore(db)}
		defer func() { dbtest.Record(t, score) }()
		rec := &recorder{}
		ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: rec, Partitions: 2, PollInterval: 10 * time.Millisecond}}})
		run(t, ob)
		n := dbtest.Pick(200, 5000)
		insert := chaosQ(db, `INSERT INTO outboxer_messages (outbox, type, group_key, part, payload, headers) VALUES ('orders', 'test.Event', ?, ?, ?, ?)`)
		var want []core.Envelope
		committed := map[int64]string{}
		bad := 0
		for i := range n {
			g := fmt.Sprint("g", i%20)
			if i%10 == 3 {
				// Another program's row: headers that are not a JSON object of strings.
				if _, err := db.ExecContext(ctx, insert, g, core.PartitionFor(g, 2), []byte(`{"seq":-1}`), `{"attempt":1}`); err != nil {
					t.Fatal(err)
				}
				bad++
				continue
			}
			env := publish(t, ob, db.DB, event{Seq: i, Group: g})[0]
			want = append(want, env)
			committed[env.ID] = g
		}
		score.Published, score.Committed = n, n
		eventually(t, 60*time.Second, "every readable message delivered and every unreadable one dead", func() bool {
			c := counts(t, ob, "orders")
			return c.Pending == 0 && c.Dead == int64(bad)
		})
		got := rec.delivered()
		var deliveries []dbtest.Delivery
		for _, e := range got {
			deliveries = append(deliveries, dbtest.Delivery{ID: e.ID, GroupKey: e.GroupKey})
		}
		score = dbtest.Tally(score, committed, deliveries)
		checkGroupOrder(t, want, got)
		dead, err := ob.ListDead(ctx, "orders", n)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range dead {
			if !strings.Contains(e.LastError, "headers") {
				t.Errorf("dead message %d: reason %q does not name the headers", e.ID, e.LastError)
			}
			if _, ok := committed[e.ID]; ok {
				t.Errorf("readable message %d is dead", e.ID)
			}
		}
		score.Notes = fmt.Sprintf("%d unreadable rows went dead alone, with the reason; the %d readable ones flowed in order", len(dead), len(want))
	})
}

func TestChaosPartitionCountChanges(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		score := dbtest.Score{Scenario: "16 partition count changes", Database: chaosScore(db)}
		defer func() { dbtest.Record(t, score) }()
		rec := &recorder{}
		relay := func(parts int) core.Config {
			return core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {
				Relay: rec, Partitions: parts, PollInterval: 10 * time.Millisecond}}}
		}
		// Publishers that disagree with the relays and with each other: 1 (the default), 3, 8.
		var pubs []*core.Outboxer
		for _, p := range []int{1, 3, 8} {
			pubs = append(pubs, setup(t, db, core.Config{PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {Partitions: p}}}))
		}
		var (
			mu       sync.Mutex
			want     []core.Envelope
			seq      atomic.Int64
			wrongAll atomic.Int64
		)
		load := func(ctx context.Context, parts func() int) *sync.WaitGroup {
			var wg sync.WaitGroup
			for i, p := range pubs {
				wg.Go(func() {
					for ctx.Err() == nil {
						s := int(seq.Add(1))
						env, err := p.Publish(context.Background(), db.DB, event{Seq: s, Group: fmt.Sprint("p", i, "-g", s%13)})
						if err != nil {
							t.Errorf("Publish: %v", err)
							return
						}
						if n := parts(); env.Partition != core.PartitionFor(env.GroupKey, n) {
							wrongAll.Add(1)
						}
						mu.Lock()
						want = append(want, env)
						mu.Unlock()
						time.Sleep(time.Millisecond)
					}
				})
			}
			return &wg
		}
		counts := []int{2, 3}
		if dbtest.Long() {
			counts = []int{2, 4, 3, 1, 5, 2}
		}
		refused := 0
		for i, n := range counts {
			{
				// A relay with the recorded count runs under load.
				runCtx, stopRun := context.WithCancel(ctx)
				ob := setup(t, db, relay(n))
				done := make(chan error, 1)
				go func() { done <- ob.Run(runCtx) }()
				eventually(t, 30*time.Second, fmt.Sprintf("a relay with %d partitions to hold them", n), func() bool {
					h, err := ob.Health(ctx, "orders")
					return err == nil && len(h.Outboxes[0].Unowned) == 0 && len(h.Outboxes[0].Owners) == 1
				})
				// Publishers read the count again after 2 s; the relay that changed it waited
				// longer, and they were idle meanwhile: every message goes where it belongs.
				pubCtx, stopPubs := context.WithCancel(ctx)
				wg := load(pubCtx, func() int { return n })
				time.Sleep(time.Duration(dbtest.Pick(500, 5000)) * time.Millisecond)
				// A relay with the next count is refused while this one runs.
				next := counts[(i+1)%len(counts)]
				if next == n {
					next++
				}
				// (Made without Migrate, which this test does not put under load.)
				other := instance(t, db, relay(next))
				bounded, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := other.Run(bounded)
				cancel()
				if !errors.Is(err, core.ErrRepartitioned) {
					t.Errorf("a relay with %d beside one with %d: Run = %v, want ErrRepartitioned", next, n, err)
				} else {
					refused++
				}
				stopPubs()
				wg.Wait()
				eventually(t, 60*time.Second, "the backlog to drain", func() bool {
					c, err := ob.Counts(ctx, "orders")
					return err == nil && c.Pending == 0
				})
				stopRun()
				if err := <-done; err != nil {
					t.Errorf("Run with %d: %v", n, err)
				}
			}
		}
		mu.Lock()
		defer mu.Unlock()
		committed := map[int64]string{}
		for _, e := range want {
			committed[e.ID] = e.GroupKey
		}
		got := rec.delivered()
		var deliveries []dbtest.Delivery
		for _, e := range got {
			deliveries = append(deliveries, dbtest.Delivery{ID: e.ID, GroupKey: e.GroupKey})
		}
		score.Published, score.Committed = len(want), len(want)
		score = dbtest.Tally(score, committed, deliveries)
		checkGroupOrder(t, want, got)
		if n := wrongAll.Load(); n > 0 {
			t.Errorf("%d messages were published outside their group's partition among the recorded count", n)
		}
		score.Notes = fmt.Sprintf("counts %v; publishers configured 1, 3, 8; %d relays with another count refused; 0 allowed to reorder (no AllowRepartition)", counts, refused)
	})
}

// instance returns an instance on db's migrated table, without migrating again.
func instance(t *testing.T, db *dbtest.DB, cfg core.Config) *core.Outboxer {
	t.Helper()
	cfg.DB, cfg.Logger = db.DB, quiet
	ob, err := core.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return ob
}

// Scenario 16, with AllowRepartition: the count goes from 4 to 2 under load while the
// relay with 4 still runs. Order across the change is not kept (the row counts what was
// reordered); nothing is lost or left where no worker delivers it.
func TestChaosPartitionCountChangesAllowed(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		score := dbtest.Score{Scenario: "16 partition count changes", Variant: "AllowRepartition, 4 to 2 under load", Database: chaosScore(db)}
		defer func() { dbtest.Record(t, score) }()
		rec := &recorder{}
		cfg := func(parts int, allow bool) core.Config {
			return core.Config{AllowRepartition: allow, LeaseDuration: 2 * time.Second, Outboxes: map[string]core.OutboxConfig{"orders": {
				Relay: rec, Partitions: parts, PollInterval: 10 * time.Millisecond}}}
		}
		pub := setup(t, db, core.Config{PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {}}})
		four := setup(t, db, cfg(4, false))
		stopFour := run(t, four)
		eventually(t, 30*time.Second, "the relay with 4 to hold them", func() bool {
			h, err := four.Health(ctx, "orders")
			return err == nil && len(h.Outboxes[0].Unowned) == 0 && len(h.Outboxes[0].Partitions) == 4
		})
		var (
			mu   sync.Mutex
			want []core.Envelope
		)
		pubCtx, stopPub := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() {
			for s := 0; pubCtx.Err() == nil; s++ {
				env, err := pub.Publish(context.Background(), db.DB, event{Seq: s, Group: fmt.Sprint("g", s%17)})
				if err != nil {
					t.Errorf("Publish: %v", err)
					return
				}
				mu.Lock()
				want = append(want, env)
				mu.Unlock()
				time.Sleep(time.Millisecond)
			}
		})
		time.Sleep(time.Duration(dbtest.Pick(500, 5000)) * time.Millisecond)
		two := instance(t, db, cfg(2, true))
		run(t, two) // changes the count beside the running relay with 4, and delivers
		eventually(t, 30*time.Second, "the count to change", func() bool {
			h, err := two.Health(ctx, "orders")
			return err == nil && len(h.Outboxes[0].Partitions) == 2
		})
		time.Sleep(time.Duration(dbtest.Pick(3000, 10000)) * time.Millisecond) // publishers read it; strays are swept
		stopFour()
		stopPub()
		wg.Wait()
		eventually(t, 60*time.Second, "the backlog to drain", func() bool {
			c, err := two.Counts(ctx, "orders")
			return err == nil && c.Pending == 0
		})
		// The relay with 4 gave its partitions up when it stopped; the one with 2 takes a
		// freed partition on its next lease round, which may come after the drain.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			h, err := two.Health(ctx, "orders")
			if err != nil {
				t.Fatal(err)
			}
			if u := h.Outboxes[0].Unowned; len(u) == 0 {
				break
			} else if time.Now().After(deadline) {
				t.Errorf("unowned partitions %v 30 s after the drain", u)
				break
			}
		}
		mu.Lock()
		defer mu.Unlock()
		committed := map[int64]string{}
		for _, e := range want {
			committed[e.ID] = e.GroupKey
		}
		var deliveries []dbtest.Delivery
		for _, e := range rec.delivered() {
			deliveries = append(deliveries, dbtest.Delivery{ID: e.ID, GroupKey: e.GroupKey})
		}
		score.Published = len(want)
		score = dbtest.Tally(score, committed, deliveries)
		if score.Lost != 0 {
			t.Errorf("%d committed messages never delivered", score.Lost)
		}
		score.Notes = "reordered and duplicated are allowed here: AllowRepartition changed the count under a running relay, whose batches in flight in the dropped partitions went out again"
	})
}
