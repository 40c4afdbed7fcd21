package dbtest_test

// Attacks on the join-order share-out of relay nodes: every node deals an
// outbox's partitions to the live nodes in join order (joined_at), then by name. Each test
// keeps the proof of what was tried: ties, a node forgotten and coming back while it holds
// its leases, join histories that differ between outboxes, and the exact number of lease
// moves as nodes join and leave one at a time.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// outboxTokens sums the lease tokens of an outbox: it grows by one at every take.
func outboxTokens(t testing.TB, ob *core.Outboxer, outbox string) int64 {
	t.Helper()
	st, err := ob.Status(context.Background(), outbox)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	var sum int64
	for _, p := range st {
		sum += p.Token
	}
	return sum
}

// expireNode makes a node's row of an outbox run out as of its last heartbeat, as if the
// node had missed its heartbeats: the others forget it, and its next heartbeat joins it
// again, last. Its leases are left alone: it still holds its partitions.
func expireNode(t testing.TB, db *dbtest.DB, outbox, owner string) {
	t.Helper()
	q := placeholders(db.Dialect, `UPDATE outboxer_messages_nodes SET expires_at = seen_at WHERE outbox = ? AND node = ?`)
	if _, err := db.ExecContext(context.Background(), q, outbox, owner); err != nil {
		t.Fatal(err)
	}
}

// joinedAt sets the join time of every node of an outbox to the same instant (ties).
func joinedAt(t testing.TB, db *dbtest.DB, outbox string, at time.Time) {
	t.Helper()
	var v any
	switch db.Dialect {
	case core.Postgres:
		v = at
	case core.MySQL:
		v = at.UTC().Format("2006-01-02 15:04:05.000000")
	case core.SQLite:
		v = at.UnixMicro()
	}
	q := placeholders(db.Dialect, `UPDATE outboxer_messages_nodes SET joined_at = ? WHERE outbox = ?`)
	if _, err := db.ExecContext(context.Background(), q, v, outbox); err != nil {
		t.Fatal(err)
	}
}

// joinNext starts an instance and waits until it is a live node.
func joinNext(t *testing.T, db *dbtest.DB, name string, parts int, rec *recorder) (*core.Outboxer, func()) {
	t.Helper()
	ob := attackInstance(t, db, name, parts, 2*time.Second, rec)
	stop := run(t, ob)
	eventually(t, 30*time.Second, name+" is live", func() bool { _, ok := nodeOf(t, ob, ob.Owner()); return ok })
	return ob, stop
}

// ownerTrail records, by reading the leases every few milliseconds, the owners each
// partition of "orders" passes through, so that a failure can show where a lease went.
type ownerTrail struct {
	mu    sync.Mutex
	trail map[int][]string
	stop  chan struct{}
	done  chan struct{}
}

func watchOwners(t testing.TB, ob *core.Outboxer, names map[string]string) *ownerTrail {
	w := &ownerTrail{trail: map[int][]string{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			st, err := ob.Status(context.Background(), "orders")
			if err != nil {
				continue
			}
			w.mu.Lock()
			for _, p := range st {
				o := "-"
				if p.LeaseHeld {
					o = names[p.Owner]
				}
				if tr := w.trail[p.Partition]; len(tr) == 0 || tr[len(tr)-1] != o {
					w.trail[p.Partition] = append(tr, o)
				}
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(w.end)
	return w
}

func (w *ownerTrail) end() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// String lists the owners each partition went through, "-" for free.
func (w *ownerTrail) String() string {
	w.end()
	var b strings.Builder
	for p := range len(w.trail) {
		fmt.Fprintf(&b, " %d:%s", p, strings.Join(w.trail[p], ">"))
	}
	return b.String()
}

// settledMoves waits until the nodes hold want (in the order of obs), lets a few
// membership reads and lease rounds pass, checks that the holdings did not change, and
// returns how many leases were taken since before.
func settledMoves(t *testing.T, obs []*core.Outboxer, want []int, before int64) int64 {
	t.Helper()
	heldBy(t, obs, want, 30*time.Second)
	time.Sleep(1500 * time.Millisecond) // six membership reads, three lease rounds
	heldBy(t, obs, want, time.Second)
	return leaseTokens(t, obs[0]) - before
}

// Three nodes on 4 partitions hold 2/1/1 in join order. The first node's row runs out
// while it still holds its leases (a slow heartbeat, a lost connection): the others forget
// it, and its next heartbeat joins it again, last. Its share goes from 2 to 1 and the
// node that is now first goes from 1 to 2: exactly one partition moves, from the node that
// came back to the new first node, once. Repeated so that each node in turn comes back;
// every message is delivered once and in order across the moves.
func TestNodesJoinForgottenHolderGivesBackOnce(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) { forgottenHolder(t, db, false) })
}

// The same with Notify (PostgreSQL): the partition given back is announced, and every node
// reads the membership at once.
func TestNodesJoinForgottenHolderGivesBackOnceNotify(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		if db.Dialect != core.Postgres {
			t.Skip("Notify is PostgreSQL's")
		}
		forgottenHolder(t, db, true)
	})
}

func forgottenHolder(t *testing.T, db *dbtest.DB, notify bool) {
	rec := &recorder{}
	var order []*core.Outboxer // join order
	for _, name := range []string{"a", "b", "c"} {
		ob := attackNotify(t, db, name, 4, 2*time.Second, rec, notify)
		run(t, ob)
		eventually(t, 30*time.Second, name+" is live", func() bool { _, ok := nodeOf(t, ob, ob.Owner()); return ok })
		order = append(order, ob)
	}
	want := []int{2, 1, 1}
	heldBy(t, order, want, 30*time.Second)
	var pub []core.Envelope
	names := map[string]string{}
	for i, ob := range order {
		names[ob.Owner()] = string(rune('a' + i))
	}
	for round := range 6 {
		before := leaseTokens(t, order[0])
		first := order[0]
		trail := watchOwners(t, first, names)
		expireNode(t, db, "orders", first.Owner())
		pub = append(pub, publish(t, first, db.DB, groups(40, 8)...)...)
		order = append(order[1:], first)
		moves := settledMoves(t, order, want, before)
		if moves != 1 {
			t.Errorf("round %d: %s came back last and gave back one partition, and %d leases moved (want 1, to %s): owners%v",
				round, names[first.Owner()], moves, names[order[0].Owner()], trail)
		}
	}
	eventually(t, 30*time.Second, "every message confirmed", func() bool { return counts(t, order[0], "orders").Pending == 0 })
	exactlyOnceInOrder(t, pub, rec)
}

// Nodes whose join times are equal (the same database-clock instant) are dealt in name
// order, by every node alike: the join times are tied by hand while three nodes that
// joined in the reverse of their names' order run. The last to join, first by name, takes
// the larger share from the node that loses it: one move, and every node's Health shows the
// same shares. Then nothing moves while the membership is stable.
func TestNodesJoinTiedJoinTimesByName(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		rec := &recorder{}
		var obs []*core.Outboxer // z, y, x: join order
		for _, name := range []string{"z", "y", "x"} {
			ob, _ := joinNext(t, db, name, 5, rec)
			obs = append(obs, ob)
		}
		heldBy(t, obs, []int{2, 2, 1}, 30*time.Second)
		first, _ := nodeOf(t, obs[0], obs[0].Owner())
		before := leaseTokens(t, obs[0])
		joinedAt(t, db, "orders", first.Joined)
		pub := publish(t, obs[0], db.DB, groups(60, 12)...)
		// By name: x 2, y 2, z 1.
		if moves := settledMoves(t, obs, []int{1, 2, 2}, before); moves != 1 {
			t.Errorf("%d lease moves after the join times were tied, want 1 (z gives one to x)", moves)
		}
		for _, ob := range obs {
			h, err := ob.Health(context.Background(), "orders")
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int{}
			for _, n := range h.Outboxes[0].Nodes {
				got[n.Node] = n.Share
				if !n.Joined.Equal(first.Joined) {
					t.Errorf("node %s joined at %v after the tie, want %v (kept by its heartbeats)", n.Node, n.Joined, first.Joined)
				}
			}
			want := map[string]int{obs[0].Owner(): 1, obs[1].Owner(): 2, obs[2].Owner(): 2}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s sees shares %v, want %v", ob.Owner(), got, want)
			}
		}
		eventually(t, 30*time.Second, "every message confirmed", func() bool { return counts(t, obs[0], "orders").Pending == 0 })
		exactlyOnceInOrder(t, pub, rec)
	})
}

// A node's join time is per outbox: two nodes relay "orders" and "bills" (3 partitions
// each, on one table); the first to join holds 2 of each. Its "bills" row runs out (its
// "orders" row does not): in "bills" it joins again, last, and gives one partition to the
// other node; in "orders" it stays first and no lease moves.
func TestNodesJoinHistoryPerOutbox(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		mk := func(name string) *core.Outboxer {
			return setup(t, db, core.Config{Name: name, LeaseDuration: 2 * time.Second, Outboxes: map[string]core.OutboxConfig{
				"orders": {Relay: &recorder{}, Partitions: 3},
				"bills":  {Relay: &recorder{}, Partitions: 3},
			}})
		}
		a, b := mk("a"), mk("b")
		run(t, a)
		// a joins each outbox on its own heartbeat: b starts once a is a member of both,
		// or b could join "bills" first.
		liveIn := func(outbox string) bool {
			h, err := a.Health(context.Background(), outbox)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range h.Outboxes[0].Nodes {
				if n.Node == a.Owner() {
					return true
				}
			}
			return false
		}
		eventually(t, 30*time.Second, "a is live in both outboxes", func() bool { return liveIn("orders") && liveIn("bills") })
		run(t, b)
		share := func(outbox string, ob *core.Outboxer) (int, int) {
			h, err := a.Health(context.Background(), outbox)
			if err != nil {
				t.Fatal(err)
			}
			oh := h.Outboxes[0]
			if len(oh.Unowned) != 0 || len(oh.Nodes) != 2 {
				return -1, -1
			}
			for _, n := range oh.Nodes {
				if n.Node == ob.Owner() {
					return n.Share, len(n.Partitions)
				}
			}
			return -1, -1
		}
		holding := func(outbox string, na, nb int) func() bool {
			return func() bool {
				sa, ha := share(outbox, a)
				sb, hb := share(outbox, b)
				return sa == na && ha == na && sb == nb && hb == nb
			}
		}
		eventually(t, 30*time.Second, "orders 2/1", holding("orders", 2, 1))
		eventually(t, 30*time.Second, "bills 2/1", holding("bills", 2, 1))
		orders, bills := outboxTokens(t, a, "orders"), outboxTokens(t, a, "bills")

		expireNode(t, db, "bills", a.Owner())
		eventually(t, 30*time.Second, "bills 1/2 once a joined bills again", holding("bills", 1, 2))
		time.Sleep(1500 * time.Millisecond)
		if !holding("orders", 2, 1)() || !holding("bills", 1, 2)() {
			t.Errorf("holdings changed after the rebalance")
		}
		if n := outboxTokens(t, a, "orders") - orders; n != 0 {
			t.Errorf("%d orders leases moved when a was forgotten in bills only", n)
		}
		if n := outboxTokens(t, a, "bills") - bills; n != 1 {
			t.Errorf("%d bills leases moved, want 1 (a gives one to b)", n)
		}
	})
}

// Six nodes join one at a time on 6 partitions, then leave gracefully one at a time, last
// first. At each step only the surplus moves: a join moves exactly what the newcomer's
// share takes from the nodes above theirs, a leave exactly what the leaver held; no lease
// bounces on the way, and every message is delivered once and in order.
func TestNodesJoinOneAtATimeMovesOnlyTheSurplus(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		rec := &recorder{}
		// Shares in join order for 1..6 nodes on 6 partitions, and the moves each join
		// makes: 3 to the second, then 2, 1, 1, 1.
		wants := [][]int{{6}, {3, 3}, {2, 2, 2}, {2, 2, 1, 1}, {2, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1}}
		joinMoves := []int64{6, 3, 2, 1, 1, 1}
		var obs []*core.Outboxer
		var stops []func()
		var pub []core.Envelope
		before := int64(0)
		for i := range 6 {
			ob, stop := joinNext(t, db, fmt.Sprintf("n%d", 5-i), 6, rec) // names against join order
			obs, stops = append(obs, ob), append(stops, stop)
			pub = append(pub, publish(t, ob, db.DB, groups(30, 6)...)...)
			if moves := settledMoves(t, obs, wants[i], before); moves != joinMoves[i] {
				t.Errorf("node %d joined: %d lease moves, want %d", i+1, moves, joinMoves[i])
			}
			before = leaseTokens(t, obs[0])
		}
		// Leaving, last first: the leaver's partitions go to the first nodes.
		for i := 5; i >= 1; i-- {
			held := int64(wants[i][i])
			stops[i]()
			obs = obs[:i]
			pub = append(pub, publish(t, obs[0], db.DB, groups(30, 6)...)...)
			if moves := settledMoves(t, obs, wants[i-1], before); moves != held {
				t.Errorf("node %d left: %d lease moves, want %d (what it held)", i+1, moves, held)
			}
			before = leaseTokens(t, obs[0])
		}
		eventually(t, 30*time.Second, "every message confirmed", func() bool { return counts(t, obs[0], "orders").Pending == 0 })
		exactlyOnceInOrder(t, pub, rec)
	})
}
