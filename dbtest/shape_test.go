package dbtest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// groupsIn returns n group keys, spread over every partition of parts.
func groupsIn(n, parts int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprint("g", i)
		if len(keys) < parts && core.PartitionFor(k, parts) != len(keys) {
			continue // the first parts keys cover each partition once
		}
		keys = append(keys, k)
	}
	return keys
}

// runHolding runs a relay of "orders" into rec with n partitions until the test ends, and
// returns once it holds them all (and so has recorded its shape).
func runHolding(t *testing.T, db *dbtest.DB, rec *recorder, n int) *core.Outboxer {
	t.Helper()
	relay := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{
		"orders": {Relay: rec, Partitions: n, PollInterval: 10 * time.Millisecond}}})
	run(t, relay)
	eventually(t, 10*time.Second, "the relay's partitions", func() bool {
		h, err := relay.Health(context.Background(), "orders")
		return err == nil && len(h.Outboxes[0].Partitions) == n && len(h.Outboxes[0].Unowned) == 0
	})
	return relay
}

// listening waits until a session LISTENs on the channel of table (PostgreSQL).
func listening(t *testing.T, db *dbtest.DB, table string) {
	t.Helper()
	eventually(t, 30*time.Second, "the relay listening", func() bool {
		var n int
		err := db.QueryRowContext(context.Background(), `SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE $1`,
			`LISTEN "outboxer.`+table+`"`).Scan(&n)
		return err == nil && n > 0
	})
}

// A dead message in a partition beyond a lowered count is revived
// into its group's partition among the recorded count, delivered, and the next run starts.
func TestRetryDeadAfterFewerPartitions(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		failing := &recorder{}
		failing.Fail = func(batch []core.Envelope) error { return core.Permanent(errors.New("broker says no")) }
		four := setup(t, db, core.Config{Manual: true, Outboxes: map[string]core.OutboxConfig{
			"orders": {Relay: failing, Partitions: 4, MaxAttempts: 1}}})
		keys := groupsIn(8, 4)
		for i, k := range keys {
			publish(t, four, db.DB, event{Seq: i, Group: k})
		}
		if _, err := four.Drain(ctx, "orders"); err != nil {
			t.Fatal(err)
		}
		if c := counts(t, four, "orders"); c.Dead != int64(len(keys)) {
			t.Fatalf("dead = %d, want %d", c.Dead, len(keys))
		}

		rec := &recorder{}
		two := setup(t, db, core.Config{Manual: true, Outboxes: map[string]core.OutboxConfig{"orders": {Relay: rec, Partitions: 2}}})
		if _, err := two.Drain(ctx, "orders"); err != nil { // the count goes down on an empty backlog
			t.Fatal(err)
		}
		n, err := two.RetryDead(ctx, "orders")
		if err != nil || n != int64(len(keys)) {
			t.Fatalf("RetryDead = %d, %v; want %d", n, err, len(keys))
		}
		pending, err := two.ListPending(ctx, "orders", 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range pending {
			if want := core.PartitionFor(e.GroupKey, 2); e.Partition != want {
				t.Errorf("message %d of group %q revived into partition %d, want %d of 2", e.ID, e.GroupKey, e.Partition, want)
			}
		}
		if _, err := two.Drain(ctx, "orders"); err != nil {
			t.Fatal(err)
		}
		if got := len(rec.delivered()); got != len(keys) {
			t.Errorf("delivered %d of %d revived messages", got, len(keys))
		}
		// A relay with the new count starts.
		runner := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {Relay: &recorder{}, Partitions: 2}}})
		bounded, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if err := runner.Run(bounded); err != nil {
			t.Errorf("Run after the retry: %v", err)
		}
	})
}

// In a rolling deploy from 4 to 2 partitions, the new node is refused
// while a node with 4 holds partitions, so the old node's messages all go out; once the
// old node stopped, the count changes, and a message written beyond it (by an older
// writer) is moved into range and delivered.
func TestRollingDeployFewerPartitions(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		oldRec := &recorder{}
		old := setup(t, db, core.Config{LeaseDuration: 2 * time.Second, Outboxes: map[string]core.OutboxConfig{
			"orders": {Relay: oldRec, Partitions: 4, PollInterval: 10 * time.Millisecond}}})
		stopOld := run(t, old)
		eventually(t, 10*time.Second, "the old node to hold its 4 partitions", func() bool {
			h, err := old.Health(ctx, "orders")
			return err == nil && len(h.Outboxes[0].Unowned) == 0 && len(h.Outboxes[0].Partitions) == 4
		})

		newRec := &recorder{}
		cfg := core.Config{LeaseDuration: 2 * time.Second, Outboxes: map[string]core.OutboxConfig{
			"orders": {Relay: newRec, Partitions: 2, PollInterval: 10 * time.Millisecond}}}
		refused := setup(t, db, cfg)
		bounded, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := refused.Run(bounded)
		cancel()
		if !errors.Is(err, core.ErrRepartitioned) || !strings.Contains(err.Error(), "configured with 2") || !strings.Contains(err.Error(), "running with 4") {
			t.Fatalf("Run with 2 beside a running node with 4 = %v, want ErrRepartitioned naming both counts", err)
		}
		keys := groupsIn(8, 4)
		for i, k := range keys {
			publish(t, old, db.DB, event{Seq: i, Group: k})
		}
		eventually(t, 10*time.Second, "the old node to deliver everything", func() bool { return len(oldRec.delivered()) == len(keys) })
		stopOld()

		fresh := setup(t, db, cfg)
		run(t, fresh)
		eventually(t, 20*time.Second, "the new count to be recorded", func() bool {
			h, err := fresh.Health(ctx, "orders")
			return err == nil && len(h.Outboxes[0].Partitions) == 2 && len(h.Outboxes[0].Owners) == 1
		})
		// A writer that still places among 4 (an older version, or a transaction open
		// across the change).
		stray := placeholders(db.Dialect, `INSERT INTO outboxer_messages (outbox, type, group_key, part, payload) VALUES ('orders', 'test.Event', ?, 3, ?)`)
		if _, err := db.ExecContext(ctx, stray, keys[3], []byte(`{"seq":99}`)); err != nil {
			t.Fatal(err)
		}
		eventually(t, 20*time.Second, "the stray message to be delivered", func() bool { return len(newRec.delivered()) == 1 })
		if e := newRec.delivered()[0]; e.Partition != core.PartitionFor(keys[3], 2) {
			t.Errorf("stray delivered from partition %d, want its group's %d", e.Partition, core.PartitionFor(keys[3], 2))
		}
		h, err := fresh.Health(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		if u := h.Outboxes[0].Unowned; len(u) != 0 {
			t.Errorf("unowned partitions %v", u)
		}
	})
}

// A publish-only node left at the default Partitions places messages
// among the count the relays recorded, never all into partition 0.
func TestPublishOnlyAdoptsTheRecordedPartitions(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		rec := &recorder{}
		runHolding(t, db, rec, 4)
		web := setup(t, db, core.Config{PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {}}})
		keys := groupsIn(12, 4)
		var msgs []core.Message
		for round := range 3 {
			for _, k := range keys {
				msgs = append(msgs, event{Seq: round, Group: k})
			}
		}
		for _, e := range publish(t, web, db.DB, msgs...) {
			if want := core.PartitionFor(e.GroupKey, 4); e.Partition != want {
				t.Errorf("group %q published into partition %d, want %d of the relays' 4", e.GroupKey, e.Partition, want)
			}
		}
		eventually(t, 10*time.Second, "delivery", func() bool { return len(rec.delivered()) == len(msgs) })
		next := map[string]int{}
		for _, e := range rec.delivered() {
			var seq int
			fmt.Sscanf(strings.TrimPrefix(string(e.Payload), `{"seq":`), "%d", &seq)
			if seq != next[e.GroupKey] {
				t.Errorf("group %q: delivered seq %d, want %d", e.GroupKey, seq, next[e.GroupKey])
			}
			next[e.GroupKey] = seq + 1
		}
	})
}

// A publisher without Notify notifies when the relays listen, so a relay
// that polls once an hour delivers at once.
func TestPublisherAdoptsTheRelaysNotify(t *testing.T) {
	db := dbtest.Postgres(t)
	rec := &recorder{}
	relay := setup(t, db, core.Config{Table: "notify_messages", Notify: true, Outboxes: map[string]core.OutboxConfig{
		"orders": {Relay: rec, PollInterval: time.Hour}, // only a notification can wake it
	}})
	web := setup(t, db, core.Config{Table: "notify_messages", PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {}}})
	run(t, relay)
	listening(t, db, "notify_messages")
	time.Sleep(200 * time.Millisecond) // the worker is asleep: what follows is woken by a notification
	env := publish(t, web, db.DB, event{Seq: 1, Group: "a"})
	eventually(t, 20*time.Second, "the message delivered, woken by a notification the publisher sent", func() bool {
		return len(rec.delivered()) == 1
	})
	if got := rec.delivered()[0]; got.ID != env[0].ID {
		t.Errorf("delivered %d, want %d", got.ID, env[0].ID)
	}
}

// A publisher configured with OrderNone places messages by group when the
// relays keep group order, and a relay with another ordering is refused while one runs.
func TestOrderingIsRecorded(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		rec := &recorder{}
		runHolding(t, db, rec, 4)
		web := setup(t, db, core.Config{PublishOnly: true, Outboxes: map[string]core.OutboxConfig{
			"orders": {Ordering: core.OrderNone, Partitions: 4}}})
		for _, e := range publish(t, web, db.DB, event{Seq: 1, Group: "a"}, event{Seq: 2, Group: "a"}, event{Seq: 3, Group: "a"}, event{Seq: 4, Group: "a"}) {
			if want := core.PartitionFor("a", 4); e.Partition != want {
				t.Errorf("message %d of group a in partition %d, want %d: placed round-robin", e.ID, e.Partition, want)
			}
		}
		other := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{
			"orders": {Relay: &recorder{}, Partitions: 4, Ordering: core.OrderNone}}})
		bounded, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := other.Run(bounded)
		if !errors.Is(err, core.ErrShapeMismatch) || !strings.Contains(err.Error(), "ordering none") || !strings.Contains(err.Error(), "ordering group") {
			t.Errorf("Run with OrderNone beside a relay with OrderGroup = %v, want ErrShapeMismatch naming both", err)
		}
		eventually(t, 10*time.Second, "delivery", func() bool { return len(rec.delivered()) == 4 })
	})
}

// In a rolling deploy from 2 to 4 partitions with AllowRepartition, every partition has a
// worker while the old node still runs: the old node, which can reach only the partitions
// of its own count, stops counting itself in the balance, and the new node aims at the
// whole recorded count.
func TestRollingDeployMorePartitions(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		t.Parallel()
		ctx := context.Background()
		oldRec, newRec := &recorder{}, &recorder{}
		old := setup(t, db, core.Config{Name: "old", LeaseDuration: 2 * time.Second, Outboxes: map[string]core.OutboxConfig{
			"orders": {Relay: oldRec, Partitions: 2, PollInterval: 10 * time.Millisecond}}})
		run(t, old)
		eventually(t, 10*time.Second, "the old node to hold its 2 partitions", func() bool {
			h, err := old.Health(ctx, "orders")
			return err == nil && len(h.Outboxes[0].Unowned) == 0 && len(h.Outboxes[0].Partitions) == 2
		})
		fresh := setup(t, db, core.Config{Name: "new", LeaseDuration: 2 * time.Second, AllowRepartition: true,
			Outboxes: map[string]core.OutboxConfig{"orders": {Relay: newRec, Partitions: 4, PollInterval: 10 * time.Millisecond}}})
		run(t, fresh)
		// Every partition owned, and so for a while: not a moment between two moves.
		owned := 0
		eventually(t, 30*time.Second, "all 4 partitions to be owned for 2 s", func() bool {
			h, err := fresh.Health(ctx, "orders")
			if err == nil && len(h.Outboxes[0].Partitions) == 4 && len(h.Outboxes[0].Unowned) == 0 {
				owned++
			} else {
				owned = 0
			}
			if owned >= 200 {
				return true
			}
			time.Sleep(5 * time.Millisecond)
			return false
		})
		keys := groupsIn(16, 4)
		var msgs []core.Message
		for i, k := range keys {
			msgs = append(msgs, event{Seq: i, Group: k})
		}
		publish(t, fresh, db.DB, msgs...)
		eventually(t, 20*time.Second, "every message to be delivered while both nodes run", func() bool {
			return len(oldRec.delivered())+len(newRec.delivered()) >= len(msgs) && counts(t, fresh, "orders").Pending == 0
		})
		if n := len(oldRec.delivered()) + len(newRec.delivered()); n != len(msgs) {
			t.Errorf("delivered %d, want %d", n, len(msgs))
		}
	})
}
