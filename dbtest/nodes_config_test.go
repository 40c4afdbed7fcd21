package dbtest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// nodeInstance is an instance relaying "orders" (8 partitions) with the given name and
// MaxPartitions.
func nodeInstance(t *testing.T, db *dbtest.DB, name string, maxParts int) *core.Outboxer {
	t.Helper()
	return setup(t, db, core.Config{Name: name, LeaseDuration: 2 * time.Second, MaxPartitions: maxParts,
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: &recorder{}, Partitions: 8}}})
}

// nodeOf returns the node of an instance in the outbox's health (false: not live).
func nodeOf(t *testing.T, ob *core.Outboxer, owner string) (core.NodeHealth, bool) {
	t.Helper()
	h, err := ob.Health(context.Background(), "orders")
	if err != nil {
		t.Fatalf("Health: %v", err)
	}
	for _, n := range h.Outboxes[0].Nodes {
		if n.Node == owner {
			return n, true
		}
	}
	return core.NodeHealth{}, false
}

func holds(t *testing.T, ob *core.Outboxer, owner string, n int) func() bool {
	return func() bool {
		nh, ok := nodeOf(t, ob, owner)
		return ok && len(nh.Partitions) == n
	}
}

// A node with MaxPartitions holds at most that many; the other nodes share the rest. The
// health lists both nodes with their share, cap and last heartbeat.
func TestMaxPartitionsCapsANode(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		capped := nodeInstance(t, db, "capped", 2)
		free := nodeInstance(t, db, "free", 0)
		if !strings.HasPrefix(capped.Owner(), "capped@") || !strings.HasPrefix(free.Owner(), "free@") || capped.Owner() == free.Owner() {
			t.Fatalf("owners %q and %q: want distinct names beginning with Config.Name@", capped.Owner(), free.Owner())
		}
		run(t, capped)
		eventually(t, 30*time.Second, "the capped node alone holds 2", holds(t, capped, capped.Owner(), 2))
		run(t, free)
		eventually(t, 30*time.Second, "the other node holds the 6 others", holds(t, capped, free.Owner(), 6))
		h, err := free.Health(context.Background(), "orders")
		if err != nil {
			t.Fatal(err)
		}
		oh := h.Outboxes[0]
		if len(oh.Unowned) != 0 || len(oh.Nodes) != 2 {
			t.Fatalf("unowned %v, nodes %+v", oh.Unowned, oh.Nodes)
		}
		for _, n := range oh.Nodes {
			wantShare, wantMax := 6, 0
			if n.Node == capped.Owner() {
				wantShare, wantMax = 2, 2
			}
			if n.Share != wantShare || n.MaxPartitions != wantMax || len(n.Partitions) != wantShare {
				t.Errorf("node %s: share %d, max %d, holds %v; want share %d, max %d", n.Node, n.Share, n.MaxPartitions, n.Partitions, wantShare, wantMax)
			}
			if age := h.At.Sub(n.LastHeartbeat); n.LastHeartbeat.IsZero() || age < 0 || age > 2*time.Second {
				t.Errorf("node %s: last heartbeat %v, %v before the health was read", n.Node, n.LastHeartbeat, age)
			}
		}
	})
}

// A node that opted out (AllPartitions) takes every free partition and gives none back;
// a balanced node gets only what it leaves, and everything once it stops.
func TestAllPartitionsNodeIsNotBalanced(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		greedy := nodeInstance(t, db, "greedy", core.AllPartitions)
		balanced := nodeInstance(t, db, "balanced", 0)
		stopGreedy := run(t, greedy)
		eventually(t, 30*time.Second, "the greedy node holds all 8", holds(t, greedy, greedy.Owner(), 8))
		run(t, balanced)
		eventually(t, 30*time.Second, "the balanced node is live", func() bool { _, ok := nodeOf(t, greedy, balanced.Owner()); return ok })
		time.Sleep(time.Second) // several membership reads: nothing moves
		if n, _ := nodeOf(t, greedy, greedy.Owner()); len(n.Partitions) != 8 || n.Share != -1 {
			t.Errorf("the greedy node holds %v with share %d; want all 8, share -1", n.Partitions, n.Share)
		}
		if n, _ := nodeOf(t, greedy, balanced.Owner()); len(n.Partitions) != 0 || n.Share != 8 {
			t.Errorf("the balanced node holds %v with share %d; want none, share 8", n.Partitions, n.Share)
		}
		stopGreedy()
		eventually(t, 30*time.Second, "the balanced node takes all 8", holds(t, balanced, balanced.Owner(), 8))
		if _, ok := nodeOf(t, balanced, greedy.Owner()); ok {
			t.Errorf("the stopped node is still listed as live")
		}
	})
}

// Tables migrated before nodes shared partitions have no nodes table: a relay logs the
// failed heartbeat and delivers everything, as before, and Health shows no nodes.
func TestRelayWithoutNodesTable(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		rec := &recorder{}
		ob := setup(t, db, core.Config{LeaseDuration: 2 * time.Second,
			Outboxes: map[string]core.OutboxConfig{"orders": {Relay: rec, Partitions: 4, PollInterval: 20 * time.Millisecond}}})
		if _, err := db.ExecContext(context.Background(), `DROP TABLE outboxer_messages_nodes`); err != nil {
			t.Fatal(err)
		}
		run(t, ob)
		var msgs []core.Message
		for i := range 40 {
			msgs = append(msgs, event{Seq: i, Group: "g" + string(rune('a'+i%7))})
		}
		publish(t, ob, db.DB, msgs...)
		eventually(t, 30*time.Second, "every message delivered", func() bool { return len(rec.Delivered()) >= 40 })
		eventually(t, 30*time.Second, "every delivery confirmed", func() bool { return counts(t, ob, "orders").Pending == 0 })
		h, err := ob.Health(context.Background(), "orders")
		if err != nil {
			t.Fatalf("Health: %v", err)
		}
		if oh := h.Outboxes[0]; oh.Nodes != nil || oh.Pending != 0 || len(oh.Owners) != 1 {
			t.Errorf("nodes %#v, pending %d, owners %v", oh.Nodes, oh.Pending, oh.Owners)
		}
	})
}
