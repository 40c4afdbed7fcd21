package core

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxer-go/outboxer/core/internal/dialect"
	"github.com/outboxer-go/outboxer/internal/dbtime"
)

// Relay nodes share each outbox's partitions.
//
// Every running instance (not PublishOnly, not Manual) heartbeats a row per outbox into
// the table's "_nodes" table, timed by the database clock like the leases, and reads the
// live rows back. A row records when its node joined: the database clock of the heartbeat
// that made it live, kept by the later ones. From the rows every node computes the same
// share-out (shares): nodes sorted by join time, then name, partitions dealt round-robin
// to the balanced ones, skipping a node at its cap. A node that joins is dealt last: when
// the nodes already there hold every partition it stands by, and takes nothing from them.
// A node forgotten after missing its heartbeats joins again as a newcomer, last; so does
// a restarted process (a new owner name, so a new node).
//
// Its own share is what its workers aim at: a worker whose partition is free takes it only
// while the node holds fewer than its share, and a worker holding one when the node holds
// more gives it back after its batch is confirmed. A lease is never taken from a live
// owner, so partitions move only when a share changes, and then only the surplus moves.
// While the membership reads succeed, a free partition is taken only when offerFree offers
// it, right after a read: a share is only as fresh as the read it came from, and one read
// while a node was forgotten (a slow heartbeat) is too high once the node is back and gives
// back what it holds beyond its new share; a worker looking on its own timer would take
// that partition, meant for another node, and give it back at the next read.

// balance is this node's share-out of one outbox.
type balance struct {
	mu    sync.Mutex
	share int // partitions this node aims at; negative: as many as it can take
	held  int // partitions this node's workers hold
	// taking: partitions this node's workers are taking (claimed, not yet acquired). They
	// count against the share when claiming, so the node does not take more than its
	// share, but not as held: a take that fails must not make a holding worker give its
	// partition back (it would be a move no share change called for).
	taking int
	known  bool // a heartbeat told the share
	// fresh: the last membership read succeeded and listed this node, so free partitions
	// are taken when offered (offerFree) only.
	fresh bool
	// forgotAt is when the membership loop last deleted the rows of lapsed nodes.
	forgotAt time.Time
}

func newBalance() *balance { return &balance{} }

// claim reserves a place for one more partition; false when the node has its share, or
// when the partition was not offered (offered false) while the membership reads succeed.
// A claim ends with took.
func (b *balance) claim(offered bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.share >= 0 && (b.held+b.taking >= b.share || !offered && b.fresh) {
		return false
	}
	b.taking++
	return true
}

// took ends a claim: the partition was taken (ok) and counts as held, or was not.
func (b *balance) took(ok bool) {
	b.mu.Lock()
	b.taking--
	if ok {
		b.held++
	}
	b.mu.Unlock()
}

// unclaim gives a held partition's place back: it was lost or released.
func (b *balance) unclaim() {
	b.mu.Lock()
	b.held--
	b.mu.Unlock()
}

// surplus reports, for a worker holding a partition, whether the node holds more than
// its share; it then counts the partition as given back already, so that only as many
// workers as needed give theirs.
func (b *balance) surplus() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.share >= 0 && b.held > b.share {
		b.held--
		return true
	}
	return false
}

// setShare records a new share and reports whether it changed.
func (b *balance) setShare(n int) bool {
	b.mu.Lock()
	changed := !b.known || b.share != n
	b.share, b.known = n, true
	b.mu.Unlock()
	return changed
}

// setFresh records whether the last membership read succeeded and listed this node.
func (b *balance) setFresh(fresh bool) {
	b.mu.Lock()
	b.fresh = fresh
	b.mu.Unlock()
}

// counts returns the share and the partitions held.
func (b *balance) counts() (share, held int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.share, b.held
}

// node is a live member of an outbox, as its heartbeat row says.
type node struct {
	name     string
	max      int       // Config.MaxPartitions of the node
	joined   time.Time // database clock when it became live (joined_at)
	lastSeen time.Time
}

// shareOrder is the order partitions are dealt in: by join time, then by name. A node that
// joins comes after every node already there: when they hold every partition already it
// is dealt none, and nothing moves.
func shareOrder(a, b node) int {
	if c := a.joined.Compare(b.joined); c != 0 {
		return c
	}
	return strings.Compare(a.name, b.name)
}

// shares deals parts partitions to the nodes: in shareOrder, round-robin over the
// balanced nodes (MaxPartitions ≥ 0), skipping a node at its cap. Every node computes the
// same result from the same rows, and the shares of the balanced nodes sum to parts when
// their caps allow it. A node that opted out (AllPartitions) has share -1: no limit.
func shares(parts int, nodes []node) map[string]int {
	sorted := slices.Clone(nodes)
	slices.SortFunc(sorted, shareOrder)
	out := make(map[string]int, len(sorted))
	var open []int // indexes of balanced nodes that can take more
	for i, n := range sorted {
		if n.max < 0 {
			out[n.name] = -1
			continue
		}
		out[n.name] = 0
		open = append(open, i)
	}
	for left := parts; left > 0 && len(open) > 0; {
		next := open[:0]
		for _, i := range open {
			if left == 0 {
				break
			}
			n := sorted[i]
			out[n.name]++
			left--
			if n.max == 0 || out[n.name] < n.max {
				next = append(next, i)
			}
		}
		open = next
	}
	return out
}

// heartbeatEvery is how often a node heartbeats; readEvery how often it reads the
// membership (a short read of a few rows): a node that joined or left is seen that soon,
// and partitions move without waiting for the next heartbeat.
func (o *Outboxer) heartbeatEvery() time.Duration {
	return min(o.cfg.LeaseDuration/4, time.Second)
}

func (o *Outboxer) readEvery() time.Duration {
	return min(o.cfg.LeaseDuration/8, 250*time.Millisecond)
}

// members heartbeats this node into every outbox's membership and keeps its shares up
// to date until stop is done; then it leaves, so that the other nodes raise their shares
// and take the partitions this node's workers give back as they stop. When done is done
// too (the workers have given everything back) it announces it and returns.
func (o *Outboxer) members(done, stop context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	// Each outbox heartbeats on its own: one whose heartbeat hangs (its row locked by
	// someone else's transaction, say) skips its turns until it returns, and does not
	// delay the others past their expiry.
	type member struct {
		busy    atomic.Bool
		beat    time.Time // when this node last heartbeat into the outbox
		failing bool      // its last heartbeat or read failed (logged once)
	}
	state := map[string]*member{}
	for _, name := range o.Outboxes() {
		state[name] = &member{}
	}
	var wg sync.WaitGroup
	for {
		select {
		case <-stop.Done():
			wg.Wait()
			ctx, cancel := context.WithTimeout(context.WithoutCancel(stop), 5*time.Second)
			o.leave(ctx)
			cancel()
			<-done.Done()
			ctx, cancel = context.WithTimeout(context.WithoutCancel(stop), 5*time.Second)
			defer cancel()
			for _, name := range o.Outboxes() {
				o.announce(ctx, o.outboxes[name])
			}
			return
		case <-t.C:
		case <-o.refresh:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
		for _, name := range o.Outboxes() {
			m := state[name]
			if !m.busy.CompareAndSwap(false, true) {
				continue
			}
			wg.Go(func() {
				defer m.busy.Store(false)
				write := time.Since(m.beat) >= o.heartbeatEvery()-o.readEvery()/2
				if write {
					m.beat = time.Now()
				}
				err := o.heartbeat(stop, o.outboxes[name], write)
				switch {
				case err != nil && stop.Err() == nil && !m.failing:
					o.cfg.Logger.Warn("outboxer: heartbeat failed; this node's share is kept until it succeeds", "outbox", name, "err", err)
					m.failing = true
				case err == nil && m.failing:
					o.cfg.Logger.Info("outboxer: heartbeat succeeds again", "outbox", name)
					m.failing = false
				}
			})
		}
		t.Reset(o.readEvery())
	}
}

// heartbeat records this node as live in an outbox (with write), reads the live nodes
// and sets this node's share. When the membership cannot be read (a table made before
// nodes shared partitions, say) and no share was ever known, the node takes what it can,
// as before.
func (o *Outboxer) heartbeat(ctx context.Context, ob *box, write bool) error {
	ctx, cancel := context.WithTimeout(ctx, max(o.cfg.LeaseDuration/2, time.Second))
	defer cancel()
	parts, limit := o.dealt(ctx, ob)
	var nodes []node
	var err error
	if write {
		nodes, err = o.beat(ctx, ob, limit)
	} else {
		nodes, err = o.liveNodes(ctx, ob)
	}
	if err != nil {
		ob.bal.setFresh(false)
		ob.bal.mu.Lock()
		known := ob.bal.known
		ob.bal.mu.Unlock()
		if !known {
			ob.bal.setShare(-1)
		}
		return err
	}
	share, ok := shares(parts, nodes)[o.owner]
	ob.bal.setFresh(ok)
	if !ok {
		return nil // our own row ran out between the two statements: next time
	}
	if ob.bal.setShare(share) {
		_, held := ob.bal.counts()
		o.cfg.Logger.Info("outboxer: share of partitions", "outboxer", o.cfg.Name, "outbox", ob.name,
			"share", share, "held", held, "nodes", len(nodes))
	}
	switch _, held := ob.bal.counts(); {
	case share >= 0 && held > share:
		// Wake the workers, idle or not: those beyond the share give their partition back
		// after the batch in flight.
		ob.signalAll(wakeNow)
	case share < 0 || held < share:
		return o.offerFree(ctx, ob, parts)
	}
	return nil
}

// dealt returns the partition count to deal among the nodes of ob, the one recorded, and
// the cap this node heartbeats with. A node whose own count differs from the record (a
// rolling deploy that changes it, with AllowRepartition) reaches only the partitions of
// its own count: it leaves the balance, as with AllPartitions, and holds what it reaches,
// while the nodes of the recorded count deal every partition among themselves, so that
// none is left without a worker while it runs.
func (o *Outboxer) dealt(ctx context.Context, ob *box) (parts, limit int) {
	parts, limit = ob.cfg.Partitions, o.cfg.MaxPartitions
	p, err := o.shapeFor(ctx, o.cfg.DB, ob)
	if err != nil || p.n == parts {
		return parts, limit
	}
	return p.n, AllPartitions
}

// offerFree wakes the workers of the outbox's free partitions, so that they take them
// (as many as the share allows) now.
func (o *Outboxer) offerFree(ctx context.Context, ob *box, parts int) error {
	var free []int
	err := o.queryCommitted(ctx, ob.sql.FreeLeases, []any{ob.name}, func(scan func(...any) error) error {
		var p int
		if err := scan(&p); err != nil {
			return err
		}
		free = append(free, p)
		return nil
	})
	if err != nil {
		return fmt.Errorf("read free partitions: %w", err)
	}
	if len(free) == 0 {
		return nil
	}
	// The share came from a membership read made before these partitions were seen free.
	// A node gives a partition back only after a heartbeat that lists it, so a read made
	// now lists every node that gave one back: without it, a read that ran while such a
	// node was forgotten would count it out, and this node would take the partition meant
	// for another one, and give one back at its next read.
	if share, _ := ob.bal.counts(); share >= 0 {
		nodes, err := o.liveNodes(ctx, ob)
		if err != nil {
			return err
		}
		share, ok := shares(parts, nodes)[o.owner]
		if !ok {
			return nil
		}
		ob.bal.setShare(share)
		if _, held := ob.bal.counts(); held >= share {
			return nil
		}
	}
	for _, p := range free {
		if p >= 0 && p < len(ob.wake) {
			ob.offer(p)
		}
	}
	return nil
}

// beat writes the heartbeat, lists the live nodes and forgets those that missed theirs.
func (o *Outboxer) beat(ctx context.Context, ob *box, limit int) ([]node, error) {
	if err := o.execCommitted(ctx, ob.sql.Heartbeat, ob.name, o.owner, limit, o.cfg.LeaseDuration.Microseconds()); err != nil {
		return nil, fmt.Errorf("write heartbeat: %w", err)
	}
	nodes, err := o.liveNodes(ctx, ob)
	if err != nil {
		return nil, err
	}
	o.forget(ctx, ob)
	return nodes, nil
}

// forget deletes, at most once a LeaseDuration, the rows of the nodes that missed their
// heartbeats, one by one and briefly: it is housekeeping (LiveNodes skips them anyway),
// and a row locked by someone else's transaction must not stop this node from reading
// the membership, nor lock the rows of the nodes it scans while it waits.
func (o *Outboxer) forget(ctx context.Context, ob *box) {
	if time.Since(ob.bal.forgotAt) < o.cfg.LeaseDuration {
		return
	}
	ob.bal.forgotAt = time.Now()
	ctx, cancel := context.WithTimeout(ctx, o.readEvery())
	defer cancel()
	var expired []string
	err := o.queryCommitted(ctx, ob.sql.ExpiredNodes, []any{ob.name}, func(scan func(...any) error) error {
		var n string
		if err := scan(&n); err != nil {
			return err
		}
		expired = append(expired, n)
		return nil
	})
	for _, n := range expired {
		if err == nil {
			err = o.execCommitted(ctx, ob.sql.ForgetNode, ob.name, n)
		}
	}
	if err != nil && ctx.Err() == nil {
		o.cfg.Logger.Debug("outboxer: forget nodes", "outbox", ob.name, "err", err)
	}
}

// liveNodes lists the nodes of an outbox whose heartbeat has not run out.
func (o *Outboxer) liveNodes(ctx context.Context, ob *box) ([]node, error) {
	var nodes []node
	err := o.queryCommitted(ctx, ob.sql.LiveNodes, []any{ob.name}, func(scan func(...any) error) error {
		var (
			n                  node
			joined, seen, when dbtime.Time
		)
		if err := scan(&n.name, &n.max, &joined, &seen, &when); err != nil {
			return err
		}
		n.joined, n.lastSeen = joined.Time, seen.Time
		nodes = append(nodes, n)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read nodes: %w", err)
	}
	slices.SortFunc(nodes, func(a, b node) int { return strings.Compare(a.name, b.name) })
	return nodes, nil
}

// leave removes this node's heartbeat rows.
func (o *Outboxer) leave(ctx context.Context) {
	for _, name := range o.Outboxes() {
		ob := o.outboxes[name]
		if err := o.execCommitted(ctx, ob.sql.LeaveNode, ob.name, o.owner); err != nil {
			o.cfg.Logger.Warn("outboxer: leave", "outbox", name, "err", err)
		}
	}
}

// nodesPayload is the notification that an outbox's membership or holdings changed:
// the nodes read the membership again and look for free partitions at once. A node of an
// earlier version reads it as a wake-up of every partition.
const nodesPayload = "nodes"

// announce tells the other nodes (PostgreSQL with Notify) that partitions of ob were given
// back or that the membership changed. Elsewhere they find out at their next look.
func (o *Outboxer) announce(ctx context.Context, ob *box) {
	if !o.cfg.Notify || o.kind != dialect.Postgres {
		return
	}
	if _, err := o.cfg.DB.ExecContext(ctx, `SELECT pg_notify($1, $2)`, ob.sql.NotifyChannel, ob.name+":"+nodesPayload); err != nil && ctx.Err() == nil {
		o.cfg.Logger.Debug("outboxer: announce", "outbox", ob.name, "err", err)
	}
}

// Owner returns the name this instance holds partition leases under and heartbeats as
// a relay node: Config.Name (its first 160 characters, control characters as "_"), then
// "@", host, process ID and a random suffix, as in "billing@host-1/4711/9f3a0c2e". Health lists nodes and lease owners by it.
func (o *Outboxer) Owner() string { return o.owner }
