package core

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/outboxer-go/outboxer/core/internal/dialect"
)

// The partition count is what every node sharing an outbox must agree on: a group's
// messages must all sit in the partition its key hashes to among the count the relays
// deliver, or two workers deliver one group at once. The database records it: a run
// makes one lease row per partition, and the rows a run made are the count (CountLeases).
//
//   - Publishers (PublishOnly or not) place messages among the recorded count, whatever
//     their own Partitions says; they read it on their first publish to an outbox and
//     again when what they read is older than shapeRefresh. Before any relay ran they use
//     their own count; the first run moves what they wrote to where it belongs.
//   - A run whose Partitions differs from the recorded count changes it only when no
//     relay holds a partition of the outbox and nothing is pending, or with
//     AllowRepartition; otherwise it is refused with ErrRepartitioned naming both counts.
//     After a change it waits until every publisher has read the new count, then moves
//     what was published with the old one.
//   - Nothing is left where no worker delivers it: RetryDead revives a dead message into
//     its group's partition among the recorded count, and every running relay moves
//     messages that sit beyond its count (written by an older version, or by a
//     transaction open across a change) into range.

// shapeRefresh is how long a publisher trusts the partition count it read.
const shapeRefresh = 2 * time.Second

// placement is the partition count a publisher places an outbox's messages among.
type placement struct {
	n  int       // partitions
	at time.Time // when it was read
}

// partitionsFor returns the partition count to place the messages of ob among: the one
// the relays recorded, or this instance's own when none has run yet. It reads it through
// db, the publishing handle (no other connection is needed, however small the pool), and
// keeps it for shapeRefresh.
func (o *Outboxer) partitionsFor(ctx context.Context, db Executor, ob *box) (int, error) {
	if p := ob.placed.Load(); p != nil && time.Since(p.at) < shapeRefresh {
		return p.n, nil
	}
	at := time.Now()
	var known int
	err := queryRows(ctx, db, ob.sql.CountLeases, []any{ob.name}, func(scan func(...any) error) error { return scan(&known) })
	if err != nil {
		if errors.Is(err, ErrInvalidExecutor) {
			return 0, err
		}
		if nm := notMigrated(ob.sql.Leases, err); nm != nil {
			return 0, nm
		}
		return 0, fmt.Errorf("outboxer: publish: read the partition count of %q: %w", ob.name, err)
	}
	n := ob.cfg.Partitions
	if known > 0 {
		n = known
	}
	old := ob.placed.Swap(&placement{n: n, at: at})
	if n != ob.cfg.Partitions && (old == nil || old.n != n) {
		o.cfg.Logger.Warn("outboxer: the relays of this outbox run with another partition count; publishing with theirs",
			"outboxer", o.cfg.Name, "outbox", ob.name, "configured", ob.cfg.Partitions, "recorded", n)
	}
	return n, nil
}

// place picks the partition of a new message among n: by a stable hash of its group key,
// or round-robin when it has none (or the outbox keeps no order).
func (o *Outboxer) place(ob *box, n int, key string) int {
	if n == 1 {
		return 0
	}
	if key == "" || ob.cfg.Ordering == OrderNone {
		return int(o.rr.Add(1) % uint64(n))
	}
	return PartitionFor(key, n)
}

// home is where a stored message belongs among n partitions: its group's partition when
// it is ordered by group; where it is when that is in range; otherwise spread by ID.
func (ob *box) home(n int, id int64, key string, part int) int {
	if ob.cfg.Ordering == OrderGroup && key != "" {
		return PartitionFor(key, n)
	}
	if part >= 0 && part < n {
		return part
	}
	return int(id % int64(n))
}

// homes reads (id, group_key, part) rows with q and returns, by target partition, the
// IDs of those not where they belong among n.
func (o *Outboxer) homes(ctx context.Context, db Executor, ob *box, n int, q string, args []any) (map[int][]int64, int, error) {
	moves := map[int][]int64{}
	read := 0
	err := queryRows(ctx, db, q, args, func(scan func(...any) error) error {
		var (
			id   int64
			key  string
			part int
		)
		if err := scan(&id, &key, &part); err != nil {
			return err
		}
		read++
		if to := ob.home(n, id, key, part); to != part {
			moves[to] = append(moves[to], id)
		}
		return nil
	})
	return moves, read, err
}

// moveChunk bounds the IDs of one statement that moves or revives messages.
const moveChunk = 5000

// eachChunk calls f for each target partition, in order, with its IDs in chunks.
func eachChunk(moves map[int][]int64, f func(part int, ids []int64) error) error {
	for _, part := range slices.Sorted(maps.Keys(moves)) {
		for ids := range slices.Chunk(moves[part], moveChunk) {
			if err := f(part, ids); err != nil {
				return err
			}
		}
	}
	return nil
}

// rehome moves the pending messages q reads that are not where they belong among n.
func (o *Outboxer) rehome(ctx context.Context, db Executor, ob *box, n int, q string, args []any) (moved int64, read int, err error) {
	moves, read, err := o.homes(ctx, db, ob, n, q, args)
	if err != nil {
		return 0, read, err
	}
	err = eachChunk(moves, func(part int, ids []int64) error {
		q, args := ob.sql.MovePending(ob.name, part, ids)
		res, err := db.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		k, _ := res.RowsAffected()
		moved += k
		return nil
	})
	return moved, read, err
}

// sweepStrays moves the pending messages of ob that sit in partitions at or beyond n
// into range: no worker would deliver them.
func (o *Outboxer) sweepStrays(ctx context.Context, ob *box, n int) (int64, error) {
	var total int64
	for {
		moved, read, err := o.rehome(ctx, o.cfg.DB, ob, n, ob.sql.Strays, []any{ob.name, n})
		total += moved
		if err != nil {
			return total, fmt.Errorf("outboxer: move messages beyond the partitions of %q: %w", ob.name, err)
		}
		if read < 1000 || moved == 0 {
			return total, nil
		}
	}
}

// sweep moves, every quarter lease, the messages published beyond the partition count of
// each outbox into range (see sweepStrays).
func (o *Outboxer) sweep(ctx context.Context) {
	for sleep(ctx, o.cfg.LeaseDuration/4) {
		for _, name := range o.Outboxes() {
			ob := o.outboxes[name]
			n, err := o.sweepStrays(ctx, ob, ob.cfg.Partitions)
			if err != nil && ctx.Err() == nil {
				o.cfg.Logger.Warn("outboxer: sweep", "outbox", name, "err", err)
			}
			if n > 0 {
				o.cfg.Logger.Warn("outboxer: moved messages published beyond the partition count into range (a publisher with another count, or an older version)",
					"outbox", name, "partitions", ob.cfg.Partitions, "moved", n)
				ob.signalAll(wakeNow)
			}
		}
	}
}

// checkPartitions makes the recorded partition count of ob agree with the configuration
// before a run (or a Drain), or refuses with ErrRepartitioned.
func (o *Outboxer) checkPartitions(ctx context.Context, ob *box) error {
	n := ob.cfg.Partitions
	var known int
	if err := o.cfg.DB.QueryRowContext(ctx, ob.sql.CountLeases, ob.name).Scan(&known); err != nil {
		return fmt.Errorf("outboxer: check partitions of %q: %w", ob.name, err)
	}
	switch known {
	case n:
		moved, err := o.sweepStrays(ctx, ob, n)
		if moved > 0 {
			o.cfg.Logger.Warn("outboxer: moved messages published beyond the partition count into range",
				"outbox", ob.name, "partitions", n, "moved", moved)
		}
		return err
	case 0:
		// No relay ran yet: publishers placed the backlog among their own count. Nothing
		// of it was delivered, so placing it among this one keeps every group's order.
		moved, _, err := o.rehome(ctx, o.cfg.DB, ob, n, ob.sql.Placement, []any{ob.name})
		if err != nil {
			return fmt.Errorf("outboxer: place the backlog of %q among %d partitions: %w", ob.name, n, err)
		}
		if moved > 0 {
			o.cfg.Logger.Warn("outboxer: messages were published among another partition count before any relay ran; moved to their partitions",
				"outbox", ob.name, "partitions", n, "moved", moved)
		}
		return nil
	}
	if err := o.changePartitions(ctx, ob, known, n); err != nil {
		return err
	}
	// Publishers elsewhere place messages among the old count until they read it again:
	// wait that out, then move what they wrote to where it belongs.
	o.cfg.Logger.Info("outboxer: partition count changed; waiting for publishers to read it",
		"outbox", ob.name, "partitions", n, "was", known, "wait", shapeRefresh+shapeRefresh/2)
	if !sleep(ctx, shapeRefresh+shapeRefresh/2) {
		return ctx.Err()
	}
	if _, _, err := o.rehome(ctx, o.cfg.DB, ob, n, ob.sql.Placement, []any{ob.name}); err != nil {
		return fmt.Errorf("outboxer: place the backlog of %q among %d partitions: %w", ob.name, n, err)
	}
	return nil
}

// changePartitions records n as the partition count of ob instead of known, in one
// transaction that holds the outbox's lease rows: it refuses, unless AllowRepartition is
// set, while a relay holds a partition (it runs with the old count: its publishes and its
// workers would split groups) or messages are pending (their order across the change
// could not be kept). It moves the pending messages to their partitions among n, drops
// the lease rows beyond n and creates the missing ones.
func (o *Outboxer) changePartitions(ctx context.Context, ob *box, known, n int) error {
	s := ob.sql
	tx, err := o.cfg.DB.BeginTx(ctx, o.txOptions())
	if err != nil {
		return fmt.Errorf("outboxer: change partitions of %q: %w", ob.name, err)
	}
	defer tx.Rollback()
	if o.kind != dialect.SQLite {
		if err := queryRows(ctx, tx, s.LockLeases, []any{ob.name}, func(func(...any) error) error { return nil }); err != nil {
			return fmt.Errorf("outboxer: change partitions of %q: lock leases: %w", ob.name, err)
		}
	}
	var live, paused int
	var pending int64
	if err := tx.QueryRowContext(ctx, s.CountLeases, ob.name).Scan(&known); err != nil {
		return fmt.Errorf("outboxer: change partitions of %q: %w", ob.name, err)
	}
	if known == n {
		return nil // another node changed it meanwhile
	}
	if err := tx.QueryRowContext(ctx, s.LiveLeases, ob.name).Scan(&live); err != nil {
		return fmt.Errorf("outboxer: change partitions of %q: %w", ob.name, err)
	}
	if err := tx.QueryRowContext(ctx, s.AnyPaused, ob.name).Scan(&paused); err != nil {
		return fmt.Errorf("outboxer: change partitions of %q: %w", ob.name, err)
	}
	err = queryRows(ctx, tx, s.Counts, []any{ob.name}, func(scan func(...any) error) error {
		var state int
		var c int64
		if err := scan(&state, &c); err != nil {
			return err
		}
		if storedState(state) == Pending {
			pending += c
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("outboxer: change partitions of %q: %w", ob.name, err)
	}
	if !o.cfg.AllowRepartition {
		if live > 0 {
			return fmt.Errorf("%w: outbox %q is configured with %d partitions, but relays running with %d hold %d of its partitions: "+
				"a rolling deploy cannot change the count; stop every relay of the old count first (a graceful stop releases its partitions at once, a crashed one's run out after LeaseDuration), "+
				"or set AllowRepartition and accept that order across the change is not kept",
				ErrRepartitioned, ob.name, n, known, live)
		}
		if pending > 0 {
			return fmt.Errorf("%w: outbox %q is configured with %d partitions, but it was last run with %d and has %d pending messages: "+
				"let it drain with the old count first (Counts shows Pending 0), or set AllowRepartition to move them and accept that order across the change is not kept",
				ErrRepartitioned, ob.name, n, known, pending)
		}
	} else if pending > 0 || live > 0 {
		o.cfg.Logger.Warn("outboxer: partitions changed on a live backlog or under running relays; order across the change is not kept",
			"outbox", ob.name, "partitions", n, "was", known, "pending", pending, "live_leases", live)
	}
	if _, _, err := o.rehome(ctx, tx, ob, n, s.Placement, []any{ob.name}); err != nil {
		return fmt.Errorf("outboxer: move partitions of %q: %w", ob.name, err)
	}
	if _, err := tx.ExecContext(ctx, s.DropLeasesFrom, ob.name, n); err != nil {
		return fmt.Errorf("outboxer: change partitions of %q: %w", ob.name, err)
	}
	for p := range n {
		if _, err := tx.ExecContext(ctx, s.EnsureLease, ob.name, p, 0, paused > 0); err != nil {
			return fmt.Errorf("outboxer: create lease of %q partition %d: %w", ob.name, p, err)
		}
	}
	if _, err := tx.ExecContext(ctx, s.ClaimLeases, ob.name, n); err != nil {
		return fmt.Errorf("outboxer: claim leases of %q: %w", ob.name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outboxer: change partitions of %q: commit: %w", ob.name, err)
	}
	ob.placed.Store(&placement{n: n, at: time.Now()})
	o.cfg.Logger.Info("outboxer: partition count changed", "outbox", ob.name, "partitions", n, "was", known)
	return nil
}

// retryDead revives dead messages of ob (those of ids, or all) into their partitions among
// the recorded count, in a transaction that holds the outbox's lease rows, so that a run
// changing the count either sees them pending or is seen.
func (o *Outboxer) retryDead(ctx context.Context, ob *box, ids []int64) (int64, error) {
	s := ob.sql
	tx, err := o.cfg.DB.BeginTx(ctx, o.txOptions())
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	if o.kind != dialect.SQLite {
		if err := queryRows(ctx, tx, s.LockLeases, []any{ob.name}, func(func(...any) error) error { return nil }); err != nil {
			return 0, fmt.Errorf("lock leases: %w", err)
		}
	}
	var n int
	if err := tx.QueryRowContext(ctx, s.CountLeases, ob.name).Scan(&n); err != nil {
		return 0, err
	}
	if n == 0 {
		n = ob.cfg.Partitions
	}
	q, args := s.DeadPlacement(ob.name, ids)
	into := map[int][]int64{}
	err = queryRows(ctx, tx, q, args, func(scan func(...any) error) error {
		var (
			id   int64
			key  string
			part int
		)
		if err := scan(&id, &key, &part); err != nil {
			return err
		}
		to := ob.home(n, id, key, part)
		into[to] = append(into[to], id)
		return nil
	})
	if err != nil {
		return 0, err
	}
	var total int64
	err = eachChunk(into, func(part int, ids []int64) error {
		q, args := s.RetryDeadInto(ob.name, part, ids)
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		k, _ := res.RowsAffected()
		total += k
		return nil
	})
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return total, nil
}
