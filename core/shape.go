package core

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxer-go/outboxer/core/internal/dialect"
)

// An outbox's shape is what every node sharing it must agree on, and the database records
// it. The partition count: a group's messages must all sit in the partition its key hashes
// to among the count the relays deliver, or two workers deliver one group at once; a run
// makes one lease row per partition, and the rows a run made are the count (CountLeases).
// The ordering (placement by group hash or round-robin, and whether a failure holds its
// group) and whether the relays listen for notifications: the lease table's shape row
// (part dialect.ShapePart), its owner column holding "ordering=group notify=true".
//
//   - Publishers (PublishOnly or not) place messages by the recorded shape, whatever their
//     own configuration says, and notify when the relays listen; they read it on their
//     first publish to an outbox and again when what they read is older than
//     shapeRefresh. Before any relay ran they use their own (the first run warns when
//     what they wrote is not where it belongs).
//   - A run whose Partitions or Ordering differs from the record changes it only when no
//     relay holds a partition of the outbox and nothing is pending, or with
//     AllowRepartition; otherwise it is refused with ErrRepartitioned or ErrShapeMismatch
//     naming both values. After a count change it waits until every publisher has read
//     the new count, then moves what was published with the old one.
//   - Nothing is left where no worker delivers it: RetryDead revives a dead message into
//     its group's partition among the recorded count, and every running relay moves
//     messages that sit beyond its count (written by an older version, or by a
//     transaction open across a change) into range.

// shapeRefresh is how long a publisher trusts the shape it read.
const shapeRefresh = 2 * time.Second

// placement is what a publisher places an outbox's messages by: the partition count, the
// ordering and whether the relays listen for notifications.
type placement struct {
	n        int       // partitions
	ordering Ordering  // the relays' ordering, or this instance's when none is recorded
	notify   bool      // the relays listen: notify them at commit (PostgreSQL)
	at       time.Time // when it was read
}

// shapeWait bounds how long a publish in a transaction waits for a connection of the pool
// to read the shape on (one being dialled, say), before it reads it in the transaction
// instead. A pool at its limit is not waited on at all.
const shapeWait = time.Second

// shapeFor returns what to place the messages of ob by: the partition count, ordering and
// notification the relays recorded, or this instance's own where nothing is recorded yet.
// It keeps them for shapeRefresh.
//
// A publish in a transaction reads them outside it, on a connection of the pool at READ
// COMMITTED (readShape): in the application's transaction, the read of the lease rows the
// relays keep writing would be a lock until its commit at SERIALIZABLE on MariaDB and
// MySQL (the relays would wait on it, or deadlock with it), and on PostgreSQL a
// dependency that fails it with a serialization error. When the pool has no connection
// free (all of it held, by transactions that publish, say), it reads through db: nothing
// else is needed, however small the pool. A handle that is not a transaction, and any
// handle on SQLite (whose transactions cannot fail for it, and whose pools often hold one
// connection), is read through directly.
func (o *Outboxer) shapeFor(ctx context.Context, db Executor, ob *box) (*placement, error) {
	if p := ob.placed.Load(); p != nil && time.Since(p.at) < shapeRefresh {
		return p, nil
	}
	at := time.Now()
	var (
		known int
		text  sql.NullString
	)
	read := func(db Executor) error {
		return queryRows(ctx, db, ob.sql.ReadShape, []any{ob.name, ob.name}, func(scan func(...any) error) error { return scan(&known, &text) })
	}
	var err error
	switch {
	case o.kind == dialect.SQLite:
		err = read(db)
	case db == Executor(o.cfg.DB):
		err = o.committed(ctx, func(db handle) error { return read(db) })
	case !inTransaction(db):
		err = read(db)
	default:
		if err = o.readShape(ctx, read); errors.Is(err, errNoConnection) {
			err = read(db)
		}
	}
	if err != nil {
		if errors.Is(err, ErrInvalidExecutor) {
			return nil, err
		}
		if nm := notMigrated(ob.sql.Leases, err); nm != nil {
			return nil, nm
		}
		return nil, fmt.Errorf("outboxer: publish: read the shape of %q: %w", ob.name, err)
	}
	p := &placement{n: ob.cfg.Partitions, ordering: ob.cfg.Ordering, notify: o.cfg.Notify, at: at}
	if known > 0 {
		p.n = known
	}
	if sh, ok := parseShape(text.String); ok && text.Valid {
		p.ordering = sh.ordering
		p.notify = p.notify || (sh.notify && o.kind == dialect.Postgres)
	}
	old := ob.placed.Swap(p)
	if p.n != ob.cfg.Partitions && (old == nil || old.n != p.n) {
		o.cfg.Logger.Warn("outboxer: the relays of this outbox run with another partition count; publishing with theirs",
			"outboxer", o.cfg.Name, "outbox", ob.name, "configured", ob.cfg.Partitions, "recorded", p.n)
	}
	if p.ordering != ob.cfg.Ordering && (old == nil || old.ordering != p.ordering) {
		o.cfg.Logger.Warn("outboxer: the relays of this outbox run with another ordering; publishing with theirs",
			"outboxer", o.cfg.Name, "outbox", ob.name, "configured", ob.cfg.Ordering, "recorded", p.ordering)
	}
	if p.notify && !o.cfg.Notify && (old == nil || !old.notify) {
		o.cfg.Logger.Info("outboxer: the relays of this outbox listen for notifications; publishing with Notify",
			"outboxer", o.cfg.Name, "outbox", ob.name)
	}
	return p, nil
}

// errNoConnection: the pool had no connection free within shapeWait.
var errNoConnection = errors.New("no connection free")

// readShape runs read on a connection of the pool, in a READ COMMITTED transaction when
// the pool's default isolation is another. It returns errNoConnection when no connection
// is free within shapeWait, at once when the pool is at its limit.
func (o *Outboxer) readShape(ctx context.Context, read func(Executor) error) error {
	if st := o.cfg.DB.Stats(); st.MaxOpenConnections > 0 && st.InUse >= st.MaxOpenConnections {
		return errNoConnection
	}
	wait, cancel := context.WithTimeout(ctx, shapeWait)
	conn, err := o.cfg.DB.Conn(wait)
	dl, _ := wait.Deadline()
	cancel()
	if err != nil {
		// A driver dialling a connection within the wait may report its end as a network
		// timeout (bun's pgdriver), not as the context's.
		if ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || !time.Now().Before(dl)) {
			return errNoConnection
		}
		return err
	}
	defer conn.Close()
	if !o.strictOn(ctx, conn) {
		return read(conn)
	}
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted, ReadOnly: true})
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := read(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// shape is what the shape row records.
type shape struct {
	ordering Ordering
	notify   bool
}

// String is the text the shape row holds: "ordering=group notify=true".
func (s shape) String() string {
	return "ordering=" + s.ordering.String() + " notify=" + strconv.FormatBool(s.notify)
}

// parseShape reads a shape row's text; ok is false when it is not one.
func parseShape(text string) (s shape, ok bool) {
	seen := 0
	for _, f := range strings.Fields(text) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "ordering":
			switch v {
			case "group":
				s.ordering = OrderGroup
			case "total":
				s.ordering = OrderTotal
			case "none":
				s.ordering = OrderNone
			default:
				return shape{}, false
			}
			seen++
		case "notify":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return shape{}, false
			}
			s.notify = b
			seen++
		}
	}
	return s, seen == 2
}

// place picks the partition of a new message among p.n: by a stable hash of its group
// key, or round-robin when it has none (or the outbox keeps no order).
func (o *Outboxer) place(p *placement, key string) int {
	if p.n == 1 {
		return 0
	}
	if key == "" || p.ordering == OrderNone {
		return int(o.rr.Add(1) % uint64(p.n))
	}
	return PartitionFor(key, p.n)
}

// home is where a stored message belongs among n partitions: its group's partition when
// the outbox is ordered by group; where it is when that is in range; otherwise spread by ID.
func home(n int, ordering Ordering, id int64, key string, part int) int {
	if ordering == OrderGroup && key != "" {
		return PartitionFor(key, n)
	}
	if part >= 0 && part < n {
		return part
	}
	return int(id % int64(n))
}

// homes reads (id, group_key, part) rows with q and returns, by the partition each
// belongs to among n under ordering, the IDs of those not there (or, with all, of every
// row), and how many rows it read.
func homes(ctx context.Context, db Executor, n int, ordering Ordering, all bool, q string, args []any) (map[int][]int64, int, error) {
	into := map[int][]int64{}
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
		if to := home(n, ordering, id, key, part); all || to != part {
			into[to] = append(into[to], id)
		}
		return nil
	})
	return into, read, err
}

// moveChunk bounds the IDs of one statement that moves or revives messages.
const moveChunk = 5000

// execChunks runs, for each target partition in order, the statement stmt makes for its
// IDs, in chunks, and returns how many rows they changed.
func execChunks(ctx context.Context, db Executor, into map[int][]int64, stmt func(part int, ids []int64) (string, []any)) (int64, error) {
	var total int64
	for _, part := range slices.Sorted(maps.Keys(into)) {
		for ids := range slices.Chunk(into[part], moveChunk) {
			q, args := stmt(part, ids)
			res, err := db.ExecContext(ctx, q, args...)
			if err != nil {
				return total, err
			}
			k, _ := res.RowsAffected()
			total += k
		}
	}
	return total, nil
}

// rehome moves the pending messages q reads that are not where they belong among n.
func (o *Outboxer) rehome(ctx context.Context, db Executor, ob *box, n int, q string, args []any) (moved int64, read int, err error) {
	moves, read, err := homes(ctx, db, n, ob.cfg.Ordering, false, q, args)
	if err != nil {
		return 0, read, err
	}
	moved, err = execChunks(ctx, db, moves, func(part int, ids []int64) (string, []any) {
		return ob.sql.MovePending(ob.name, part, ids)
	})
	return moved, read, err
}

// sweepStrays moves the pending messages of ob that sit in partitions at or beyond n
// into range: no worker would deliver them.
func (o *Outboxer) sweepStrays(ctx context.Context, ob *box, n int) (int64, error) {
	var total int64
	for {
		var (
			moved int64
			read  int
		)
		err := o.committed(ctx, func(db handle) (err error) {
			moved, read, err = o.rehome(ctx, db, ob, n, ob.sql.Strays, []any{ob.name, n})
			return err
		})
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

// checkPartitions makes the recorded shape of ob (checkShape) and its partition count
// agree with the configuration before a run (or a Drain), or refuses with
// ErrShapeMismatch or ErrRepartitioned.
func (o *Outboxer) checkPartitions(ctx context.Context, ob *box) error {
	if err := o.checkShape(ctx, ob); err != nil {
		return err
	}
	n := ob.cfg.Partitions
	var known int
	if err := o.committed(ctx, func(db handle) error {
		return db.QueryRowContext(ctx, ob.sql.CountLeases, ob.name).Scan(&known)
	}); err != nil {
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
		// No relay ran yet: publishers placed the backlog among their own count, or
		// another program wrote it without setting part. Moving it would split the groups
		// of a writer that keeps writing so: say so instead.
		var moves map[int][]int64
		err := o.committed(ctx, func(db handle) (err error) {
			moves, _, err = homes(ctx, db, n, ob.cfg.Ordering, false, ob.sql.Placement, []any{ob.name})
			return err
		})
		if err != nil {
			return fmt.Errorf("outboxer: check the backlog of %q: %w", ob.name, err)
		}
		misplaced := 0
		for _, ids := range moves {
			misplaced += len(ids)
		}
		if misplaced > 0 {
			o.cfg.Logger.Warn("outboxer: pending messages are not in their group's partition among the configured count: "+
				"they were published before any relay ran by a publisher with another Partitions, or written by a program that does not set part; "+
				"their groups may be delivered out of order",
				"outbox", ob.name, "partitions", n, "misplaced", misplaced)
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
	if err := o.committed(ctx, func(db handle) error {
		_, _, err := o.rehome(ctx, db, ob, n, ob.sql.Placement, []any{ob.name})
		return err
	}); err != nil {
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
	tx, err := o.beginLocked(ctx, ob)
	if err != nil {
		return fmt.Errorf("outboxer: change partitions of %q: %w", ob.name, err)
	}
	defer tx.Rollback()
	var paused int
	if err := tx.QueryRowContext(ctx, s.CountLeases, ob.name).Scan(&known); err != nil {
		return fmt.Errorf("outboxer: change partitions of %q: %w", ob.name, err)
	}
	if known == n {
		return nil // another node changed it meanwhile
	}
	live, pending, err := o.inUse(ctx, tx, ob)
	if err != nil {
		return fmt.Errorf("outboxer: change partitions of %q: %w", ob.name, err)
	}
	if err := tx.QueryRowContext(ctx, s.AnyPaused, ob.name).Scan(&paused); err != nil {
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
	ob.placed.Store(nil) // read again on the next publish
	o.cfg.Logger.Info("outboxer: partition count changed", "outbox", ob.name, "partitions", n, "was", known)
	return nil
}

// inUse counts, in tx, the partitions of ob held by a running relay and its pending messages.
func (o *Outboxer) inUse(ctx context.Context, tx *sql.Tx, ob *box) (live int, pending int64, err error) {
	if err := tx.QueryRowContext(ctx, ob.sql.LiveLeases, ob.name).Scan(&live); err != nil {
		return 0, 0, err
	}
	err = queryRows(ctx, tx, ob.sql.Counts, []any{ob.name}, func(scan func(...any) error) error {
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
	return live, pending, err
}

// beginLocked begins a transaction that holds the lease rows of ob (on SQLite, which has
// one writer, any transaction does). The caller rolls it back or commits it.
func (o *Outboxer) beginLocked(ctx context.Context, ob *box) (*sql.Tx, error) {
	tx, err := o.cfg.DB.BeginTx(ctx, o.txOptions())
	if err != nil {
		return nil, err
	}
	if o.kind == dialect.SQLite {
		return tx, nil
	}
	if err := queryRows(ctx, tx, ob.sql.LockLeases, []any{ob.name}, func(func(...any) error) error { return nil }); err != nil {
		_ = tx.Rollback()
		return nil, fmt.Errorf("lock leases: %w", err)
	}
	return tx, nil
}

// checkShape makes the ordering and the notification recorded for ob agree with the
// configuration, or refuses. The first run records them. A run with another ordering
// changes it only when no relay holds a partition and nothing is pending (or with
// AllowRepartition): messages placed and held by one ordering would be delivered by
// another; it is refused with ErrShapeMismatch otherwise. Notify is recorded as set as
// soon as a relay listens, and as unset only by a relay that runs alone.
func (o *Outboxer) checkShape(ctx context.Context, ob *box) error {
	s := ob.sql
	tx, err := o.beginLocked(ctx, ob)
	if err != nil {
		return fmt.Errorf("outboxer: check the shape of %q: %w", ob.name, err)
	}
	defer tx.Rollback()
	var (
		known int
		text  sql.NullString
	)
	if err := tx.QueryRowContext(ctx, s.ReadShape, ob.name, ob.name).Scan(&known, &text); err != nil {
		return fmt.Errorf("outboxer: check the shape of %q: %w", ob.name, err)
	}
	want := shape{ordering: ob.cfg.Ordering, notify: o.cfg.Notify}
	rec, ok := parseShape(text.String)
	next := want
	if ok && rec != want {
		next = rec
		live, pending, err := o.inUse(ctx, tx, ob)
		if err != nil {
			return fmt.Errorf("outboxer: check the shape of %q: %w", ob.name, err)
		}
		if rec.ordering != want.ordering {
			if !o.cfg.AllowRepartition && (live > 0 || pending > 0) {
				return fmt.Errorf("%w: outbox %q is configured with ordering %s, but its relays recorded ordering %s, and %d of its partitions are held by running relays and %d messages are pending: "+
					"stop every relay of the old ordering and let the outbox drain first, or set AllowRepartition and accept that order across the change is not kept",
					ErrShapeMismatch, ob.name, want.ordering, rec.ordering, live, pending)
			}
			next.ordering = want.ordering
		}
		if want.notify || live == 0 {
			next.notify = want.notify // a running relay that listens keeps it set
		}
	}
	switch {
	case !text.Valid:
		_, err = tx.ExecContext(ctx, s.EnsureShape, ob.name, next.String())
	case !ok || next != rec:
		_, err = tx.ExecContext(ctx, s.SetShape, next.String(), ob.name)
	default:
		return nil
	}
	if err != nil {
		return fmt.Errorf("outboxer: record the shape of %q: %w", ob.name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outboxer: record the shape of %q: %w", ob.name, err)
	}
	ob.placed.Store(nil) // read again on the next publish
	if ok && next != rec {
		o.cfg.Logger.Info("outboxer: shape of the outbox changed", "outbox", ob.name, "shape", next.String(), "was", rec.String())
	}
	return nil
}

// retryDead revives dead messages of ob (those of ids, or all) into their partitions among
// the recorded count, in a transaction that holds the outbox's lease rows, so that a run
// changing the count either sees them pending or is seen.
func (o *Outboxer) retryDead(ctx context.Context, ob *box, ids []int64) (int64, error) {
	s := ob.sql
	tx, err := o.beginLocked(ctx, ob)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	var (
		n    int
		text sql.NullString
	)
	if err := tx.QueryRowContext(ctx, s.ReadShape, ob.name, ob.name).Scan(&n, &text); err != nil {
		return 0, err
	}
	if n == 0 {
		n = ob.cfg.Partitions
	}
	ordering := ob.cfg.Ordering
	if sh, ok := parseShape(text.String); ok {
		ordering = sh.ordering
	}
	q, args := s.DeadPlacement(ob.name, ids)
	into, _, err := homes(ctx, tx, n, ordering, true, q, args)
	if err != nil {
		return 0, err
	}
	total, err := execChunks(ctx, tx, into, func(part int, ids []int64) (string, []any) {
		return s.RetryDeadInto(ob.name, part, ids)
	})
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return total, nil
}
