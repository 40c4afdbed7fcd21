package dbtest_test

// Reliability scenario 14: names differing in trailing spaces. Outbox names and group
// keys are compared byte for byte on every database. MariaDB's utf8mb4_bin is a PAD
// SPACE collation ('a' = 'a '): before the columns were made utf8mb4_nopad_bin, a group
// key of spaces counted as unordered, a blocked group "a" blocked "a " too, and the relay
// of outbox "orders" delivered the messages of outbox "orders ", the two sharing one
// lease row.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// Group keys that differ in trailing spaces are different groups, and a key of spaces is
// a group (ordered), not the unordered "".
func TestChaosGroupKeysDifferingInTrailingSpaces(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		score := dbtest.Score{Scenario: "14 names differing in trailing spaces", Variant: "group keys", Database: chaosScore(db)}
		defer func() { dbtest.Record(t, score) }()
		rec := &recorder{}
		rec.Fail = func(batch []core.Envelope) error {
			for _, e := range batch {
				if e.GroupKey == "a" || (e.GroupKey == "   " && e.Attempts == 0) {
					return &core.PartialFailure{Failed: map[int64]error{e.ID: errors.New("poison")}}
				}
			}
			return nil
		}
		ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: rec, PollInterval: 10 * time.Millisecond,
			Backoff: core.Backoff{Func: func(int) time.Duration { return 300 * time.Millisecond }},
		}}})
		publish(t, ob, db.DB, event{Seq: 1, Group: "a"}) // blocked: it fails every time
		run(t, ob)
		eventually(t, 30*time.Second, `group "a" blocked`, func() bool {
			l, err := ob.ListPending(ctx, "orders", 1)
			return err == nil && len(l) == 1 && l[0].Attempts >= 1
		})
		// "a " flows past the blocked "a"; the first message of "   " fails once, and the
		// second waits for it (a padded comparison made "   " unordered: it went first).
		want := publish(t, ob, db.DB, event{Seq: 2, Group: "a "}, event{Seq: 3, Group: "   "}, event{Seq: 4, Group: "   "})
		eventually(t, 30*time.Second, `groups "a " and "   " delivered`, func() bool {
			return len(rec.delivered()) == 3 && counts(t, ob, "orders").Pending == 1
		})
		got := rec.delivered()
		committed := map[int64]string{}
		for _, e := range want {
			committed[e.ID] = e.GroupKey
		}
		var deliveries []dbtest.Delivery
		for _, e := range got {
			deliveries = append(deliveries, dbtest.Delivery{ID: e.ID, GroupKey: e.GroupKey})
		}
		score.Published = len(want)
		score = dbtest.Tally(score, committed, deliveries)
		score.Notes = `"a " went past a blocked "a"; "   " kept its order through a retry`
		checkGroupOrder(t, want, got)
		for _, e := range got {
			if e.GroupKey == "a" {
				t.Errorf("the blocked message %d of %q was delivered", e.ID, e.GroupKey)
			}
			if _, ok := committed[e.ID]; !ok {
				t.Errorf("delivered %d %q, not one of %v", e.ID, e.GroupKey, want)
			}
		}
	})
}

// Outboxes whose names differ in trailing spaces are different outboxes: each relay
// delivers its own messages only, each has its own leases.
func TestChaosOutboxNamesDifferingInTrailingSpaces(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		score := dbtest.Score{Scenario: "14 names differing in trailing spaces", Variant: "outbox names", Database: chaosScore(db)}
		defer func() { dbtest.Record(t, score) }()
		plain, padded := &recorder{}, &recorder{}
		ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{
			"orders":  {Relay: plain, PollInterval: 10 * time.Millisecond, Partitions: 2},
			"orders ": {Relay: padded, PollInterval: 10 * time.Millisecond, Partitions: 2},
		}})
		var msgs []core.Message
		for i := range 20 {
			box := "orders"
			if i%2 == 1 {
				box = "orders "
			}
			msgs = append(msgs, event{Box: box, Seq: i, Group: string(rune('a' + (i/2)%4))})
		}
		envs := publish(t, ob, db.DB, msgs...)
		run(t, ob)
		eventually(t, 30*time.Second, "both outboxes delivered", func() bool {
			return counts(t, ob, "orders").Pending == 0 && counts(t, ob, "orders ").Pending == 0
		})
		committed := map[int64]string{}
		for _, e := range envs {
			committed[e.ID] = e.Outbox + "/" + e.GroupKey
		}
		var deliveries []dbtest.Delivery
		for name, rec := range map[string]*recorder{"orders": plain, "orders ": padded} {
			for _, e := range rec.delivered() {
				deliveries = append(deliveries, dbtest.Delivery{ID: e.ID, GroupKey: e.Outbox + "/" + e.GroupKey})
				if e.Outbox != name || committed[e.ID] != name+"/"+e.GroupKey {
					t.Errorf("the relay of %q was handed message %d (outbox %q, published to %q)", name, e.ID, e.Outbox, committed[e.ID])
				}
			}
		}
		score.Published = len(envs)
		score = dbtest.Tally(score, committed, deliveries)
		if score.Delivered != len(envs) || score.Duplicated != 0 {
			t.Errorf("delivered %d (%d duplicated), want each of the %d once", score.Delivered, score.Duplicated, len(envs))
		}
		// Each outbox has its own two lease rows, held by this run.
		for _, name := range []string{"orders", "orders "} {
			st, err := ob.Status(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if len(st) != 2 {
				t.Errorf("outbox %q: %d partitions in its status, want 2", name, len(st))
			}
		}
		score.Notes = `each relay was handed its own outbox's messages only`
	})
}
