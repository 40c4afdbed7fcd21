package dbtest_test

// Setting blocked groups aside: group keys that differ only in case or spaces, more
// blocked groups than the set-aside list holds, a head discarded and retried while its
// group is set aside, and a second node joining meanwhile.

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
