package outboxerui

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/internal/dbtime"
)

// Bounds of the reads of the overview and the outbox page, so that a page costs the same
// on a backlog of a thousand messages or of millions. A count reads at most countCap+1
// entries of an index that holds what it counts (not the rows); a figure that needs the
// rows (retrying, scheduled, dead per partition, blocked groups) reads at most
// sampleCap+1 of them. Above the bound the page shows a lower bound, as "10000+".
const (
	countCap  = 10_000
	sampleCap = 1_000
	// headRows bounds the ready messages of a partition read for the oldest due one.
	headRows = 100
)

// count is a number of messages read with a bound: N exactly, or at least N when Exact
// is false (the count stopped at its bound).
type count struct {
	N     int64
	Exact bool
}

func exact(n int64) count { return count{N: n, Exact: true} }

// capped is the count of a read that returned n rows of at most bound+1.
func capped(n, bound int64) count {
	if n > bound {
		return count{N: bound}
	}
	return exact(n)
}

func (c count) add(d count) count { return count{N: c.N + d.N, Exact: c.Exact && d.Exact} }

// String is N, followed by "+" when it is a lower bound.
func (c count) String() string {
	s := strconv.FormatInt(c.N, 10)
	if !c.Exact {
		s += "+"
	}
	return s
}

// age is how long a message has waited: D exactly, or at least D when Exact is false.
type age struct {
	D     time.Duration
	Exact bool
}

func (a age) String() string {
	if a.D <= 0 {
		if a.Exact {
			return "—"
		}
		return "?"
	}
	if !a.Exact {
		return human(a.D) + "+"
	}
	return human(a.D)
}

// outboxStats are the figures of one outbox the overview and the outbox page show. The
// counts of messages are bounded (count); the leases are read exactly.
type outboxStats struct {
	Outbox string
	At     time.Time // the database clock when the figures were read
	// Pending, Retrying, Scheduled and Dead select what the message lists of the same
	// name list (see store.where).
	Pending, Retrying, Scheduled, Dead count
	// OldestAge is how long the oldest due message has waited (see readStats).
	OldestAge age
	// AllWaitingRead: the waiting and held messages of every partition were read in
	// full (sampleCap rows are shared among the partitions), and the figures read from
	// them are exact.
	AllWaitingRead bool
	Delivered5m    count
	Paused         bool
	Owners         map[string]int // live owner → partitions held
	Owned          int
	Unowned        []int
	Partitions     []partStats
}

// partStats are the figures of one partition, as outboxStats.
type partStats struct {
	Partition                    int
	Pending, Retrying, Scheduled count
	// Dead is nil when the outbox has more than sampleCap dead messages (not read by
	// partition).
	Dead         *count
	OldestAge    age
	Owner        string
	LeaseHeld    bool
	LeaseExpires time.Time
	Token        int64
	Paused       bool
}

// dueSince is when a pending message became due, as core.Health reads it: its creation
// once attempted (a retry moved available_at), its available_at otherwise; NULL while it
// is scheduled in the future.
func (s *store) dueSince() string {
	return `CASE WHEN attempts > 0 THEN created_at WHEN available_at <= ` + s.now() + ` THEN available_at END`
}

// limited is a subquery of at most bound+1 rows of the message table, in the order of
// the index that serves cond: without it, PostgreSQL reads a table where many rows match
// by a sequential scan that stops at the limit, which can read the whole table first
// when the rows sought are at its end.
func (s *store) limited(cols, cond, order string, bound int) string {
	return `(SELECT ` + cols + ` FROM ` + s.msgs + ` WHERE ` + cond + ` ORDER BY ` + order + ` LIMIT ` + strconv.Itoa(bound+1) + `) t`
}

// The orders of the indexes the bounded reads use (see Up in core/internal/dialect):
// ready rows by (outbox, part, id); dead ones by (outbox, id), on MySQL by (outbox,
// state, part, id); waiting and held ones by (outbox, part, group_key, id), on MySQL by
// (outbox, state, part, id).
func (s *store) deadOrder() string {
	if s.dialect == core.MySQL {
		return "part, id"
	}
	return "outbox, id"
}

// deadCond selects the dead messages of an outbox (its argument twice). On PostgreSQL
// and SQLite the outbox is a range, so that ORDER BY outbox, id (deadOrder) keeps to the
// index of dead rows: with outbox = ?, ORDER BY id is all that is left, which the
// primary key gives too, through every row before the outbox's first dead one.
func (s *store) deadCond() (string, int) {
	if s.dialect == core.MySQL {
		return "outbox = ? AND state = 2", 1
	}
	return "outbox >= ? AND outbox <= ? AND state = 2", 2
}

func (s *store) waitingOrder() string {
	if s.dialect == core.MySQL {
		return "state, part, id"
	}
	return "part, group_key, id"
}

// lease is a partition's lease row.
type lease struct {
	part    int
	owner   string
	token   int64
	expires time.Time
	held    bool
	paused  bool
}

// leases reads the lease rows of every outbox (a small table: a row per partition).
func (s *store) readLeases(ctx context.Context) (map[string][]lease, time.Time, error) {
	out := map[string][]lease{}
	var at time.Time
	err := s.query(ctx, `SELECT outbox, part, owner, token, `+s.timeCol("expires_at")+`, paused, `+s.timeCol(s.now())+
		` FROM `+s.leases+` WHERE part >= 0 ORDER BY outbox, part`, nil, func(scan func(...any) error) error {
		var (
			name           string
			l              lease
			expires, dbNow dbtime.Time
		)
		if err := scan(&name, &l.part, &l.owner, &l.token, &expires, &l.paused, &dbNow); err != nil {
			return err
		}
		l.held = l.owner != "" && expires.After(dbNow.Time)
		if l.held {
			l.expires = expires.Time
		}
		at = dbNow.Time
		out[name] = append(out[name], l)
		return nil
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("outboxerui: read the leases of %s: %w", s.msgs, err)
	}
	return out, at, nil
}

// partitionsWithMessages returns the partitions of outbox that hold pending messages:
// one index probe per partition and state.
func (s *store) partitionsWithMessages(ctx context.Context, outbox string) ([]int, error) {
	var parts []int
	if s.dialect == core.MySQL {
		// MySQL allows no recursive reference in a subquery, and reads every entry
		// of the outbox for a DISTINCT: a probe for the next partition after the last
		// found, in each state, until there is none.
		next := s.p(`SELECT MIN(p) FROM (SELECT MIN(part) AS p FROM ` + s.msgs + ` WHERE outbox = ? AND state = 0 AND part > ?` +
			` UNION ALL SELECT MIN(part) FROM ` + s.msgs + ` WHERE outbox = ? AND state = 3 AND part > ?` +
			` UNION ALL SELECT MIN(part) FROM ` + s.msgs + ` WHERE outbox = ? AND state = 4 AND part > ?) t`)
		last := -1
		for {
			var p sql.NullInt64
			if err := s.db.QueryRowContext(ctx, next, outbox, last, outbox, last, outbox, last).Scan(&p); err != nil {
				return nil, fmt.Errorf("outboxerui: read the partitions of %q: %w", outbox, err)
			}
			if !p.Valid {
				return parts, nil
			}
			last = int(p.Int64)
			parts = append(parts, last)
		}
	}
	// Ready rows by the index of ready rows, waiting and held ones by the index of
	// blocking rows: both start with (outbox, part).
	skip := func(t, pred string) string {
		return t + `(p) AS (SELECT MIN(part) FROM ` + s.msgs + ` WHERE outbox = ? AND ` + pred +
			` UNION ALL SELECT (SELECT MIN(part) FROM ` + s.msgs + ` WHERE outbox = ? AND ` + pred + ` AND part > ` + t + `.p) FROM ` + t +
			` WHERE ` + t + `.p IS NOT NULL)`
	}
	q := `WITH RECURSIVE ` + skip("r", "state = 0") + `, ` + skip("w", "state IN (3, 4)") +
		` SELECT p FROM r WHERE p IS NOT NULL UNION SELECT p FROM w WHERE p IS NOT NULL`
	err := s.query(ctx, q, []any{outbox, outbox, outbox, outbox}, func(scan func(...any) error) error {
		var p int
		err := scan(&p)
		parts = append(parts, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("outboxerui: read the partitions of %q: %w", outbox, err)
	}
	return parts, nil
}

// readStats reads the figures of outbox, with every partition in parts (those the lease
// table and the outbox list know of) and any other that holds pending messages.
// byPartition asks for the counts of each partition (the outbox page); without it only
// the outbox's counts are read (the overview), and the partitions' counts are zero.
//
// Every statement reads a bounded part of an index, in three or four statements. Counts
// read at most countCap+1 entries of an index that holds what they count (pending, dead,
// delivered), without the rows; per partition, countCap shared among the partitions. The figures that need the rows (retrying, scheduled,
// and the dead of each partition) are read from sampleCap rows (the waiting and held ones
// shared among the partitions), and are lower bounds when there are more; the dead of
// each partition are not read then. The oldest due message is found by index probes per
// partition and among the rows read.
//
// OldestAge is the longest wait among: the first ready message of each partition (the
// lowest ID, which the relay delivers first), the first waiting message of each
// partition when it is already due, and the waiting and held messages read (a failed
// one waits since it was published, as core.Health counts it). That is core.Health's
// OldestAge when every waiting and held message was read (AllWaitingRead), unless a
// message scheduled earlier became due after a later one of its partition: then the
// page shows the wait of the first in line. Otherwise it is a lower bound.
func (s *store) readStats(ctx context.Context, outbox string, parts []int, ls []lease, byPartition bool) (outboxStats, error) {
	st := outboxStats{Outbox: outbox, Owners: map[string]int{}, Unowned: []int{}}
	ps := map[int]*partStats{}
	get := func(p int) *partStats {
		if ph, ok := ps[p]; ok {
			return ph
		}
		ph := &partStats{Partition: p, Pending: exact(0), Retrying: exact(0), Scheduled: exact(0), Dead: &count{Exact: true}}
		ps[p] = ph
		return ph
	}
	for _, p := range parts {
		get(p)
	}
	for _, l := range ls {
		ph := get(l.part)
		ph.Owner, ph.LeaseHeld, ph.LeaseExpires, ph.Token, ph.Paused = l.owner, l.held, l.expires, l.token, l.paused
	}
	withMsgs, err := s.partitionsWithMessages(ctx, outbox)
	if err != nil {
		return outboxStats{}, err
	}
	for _, p := range withMsgs {
		get(p)
	}
	fail := func(what string, err error) (outboxStats, error) {
		return outboxStats{}, fmt.Errorf("outboxerui: read the %s of %q: %w", what, outbox, err)
	}
	countOf := func(cond, order string, bound int) string {
		return `(SELECT COUNT(*) FROM ` + s.limited("1", cond, order, bound) + `)`
	}

	// The outbox's counts: ready (the overview), waiting and held (the overview), dead,
	// and delivered in the last five minutes (kept by core.KeepFor).
	var ready, waiting, dead, delivered sql.NullInt64
	cols := []string{`NULL`, `NULL`}
	args := []any{}
	if !byPartition {
		cols = []string{countOf("outbox = ? AND state = 0", "part, id", countCap), countOf("outbox = ? AND state IN (3, 4)", s.waitingOrder(), countCap)}
		args = append(args, outbox, outbox)
	}
	deadCond, n := s.deadCond()
	cols = append(cols, countOf(deadCond, s.deadOrder(), countCap),
		countOf("outbox = ? AND state = 1 AND delivered_at > "+s.minus(), "delivered_at", countCap))
	for range n {
		args = append(args, outbox)
	}
	args = append(args, outbox, (5 * time.Minute).Microseconds())
	if err := s.db.QueryRowContext(ctx, s.p(`SELECT `+strings.Join(cols, ", ")), args...).Scan(&ready, &waiting, &dead, &delivered); err != nil {
		return fail("counts", err)
	}
	st.Dead, st.Delivered5m = capped(dead.Int64, countCap), capped(delivered.Int64, countCap)

	// Per partition, in one statement: the head of the line of ready messages, when the
	// first waiting message is due, on the outbox page the counts of ready and of
	// waiting and held messages, and the figures of some of these. The bounds are
	// shared among the partitions.
	due := s.dueSince()
	// part >= ? AND part <= ?, not part = ?, with ORDER BY part, id: only the index of
	// ready rows gives that order. With part = ?, ORDER BY id is all that is left, and
	// PostgreSQL or MariaDB may read the primary key in order instead, through every
	// row before the partition's first (all the delivered rows kept, for one).
	partRange := "outbox = ? AND part >= ? AND part <= ?"
	perPart, countPerPart := max(sampleCap/len(ps), 100), max(countCap/len(ps), 1000)
	counts := `NULL, NULL`
	if byPartition {
		counts = countOf(partRange+" AND state = 0", "part, id", countPerPart) + `, ` +
			countOf("outbox = ? AND part = ? AND state IN (3, 4)", s.waitingOrder(), countPerPart)
	}
	// stmt is the statement of one partition (its number in place of %d), reading at most
	// sample+1 of its waiting and held rows.
	stmt := func(sample int) string {
		return `SELECT %d AS part, ` + counts + `, ` +
			`h.head, h.n, ` +
			`(SELECT ` + s.timeCol(`MIN(available_at)`) + ` FROM ` + s.msgs + ` WHERE outbox = ? AND part = ? AND state = 3) AS next, ` +
			`y.n, y.retrying, y.scheduled, y.since, ` + s.timeCol(s.now()) + ` AS at FROM (SELECT COUNT(*) AS n, ` +
			`COALESCE(SUM(CASE WHEN attempts > 0 THEN 1 ELSE 0 END), 0) AS retrying, ` +
			`COALESCE(SUM(CASE WHEN state = 3 AND attempts = 0 AND available_at > ` + s.now() + ` THEN 1 ELSE 0 END), 0) AS scheduled, ` +
			s.timeCol(`MIN(`+due+`)`) + ` AS since` +
			` FROM ` + s.limited("state, attempts, available_at, created_at", "outbox = ? AND part = ? AND state IN (3, 4)", s.waitingOrder(), sample) + `) y, ` +
			`(SELECT ` + s.timeCol(`MIN(d)`) + ` AS head, COUNT(*) AS n FROM ` + s.limited(due+` AS d`, partRange+` AND state = 0`, "part, id", headRows) + `) h`
	}
	type partRow struct {
		ready, waiting               sql.NullInt64
		head, next, since, at        dbtime.Time
		headRead                     int64
		sampled, retrying, scheduled int64
		sample                       int // the bound its waiting and held rows were read with
	}
	rows := map[int]partRow{}
	// partsPerStatement partitions a statement: SQLite refuses a compound SELECT of more
	// than 500 parts, and the planning of one grows faster than its parts on PostgreSQL.
	const partsPerStatement = 32
	read := func(parts []int, sample int) error {
		one := stmt(sample)
		for chunk := range slices.Chunk(parts, partsPerStatement) {
			var stmts []string
			args = nil
			for _, p := range chunk {
				stmts = append(stmts, fmt.Sprintf(one, p))
				if byPartition {
					args = append(args, outbox, p, p, outbox, p)
				}
				args = append(args, outbox, p, outbox, p, outbox, p, p)
			}
			err := s.query(ctx, strings.Join(stmts, " UNION ALL "), args, func(scan func(...any) error) error {
				var p int
				r := partRow{sample: sample}
				err := scan(&p, &r.ready, &r.waiting, &r.head, &r.headRead, &r.next, &r.sampled, &r.retrying, &r.scheduled, &r.since, &r.at)
				rows[p] = r
				if st.At.IsZero() || r.at.After(st.At) {
					st.At = r.at.Time
				}
				return err
			})
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := read(slices.Sorted(maps.Keys(ps)), perPart); err != nil {
		return fail("partitions", err)
	}
	// The sample is shared among the partitions, but one partition may hold most of what
	// waits: when no more than sampleCap messages wait in all, the partitions whose share
	// ran out are read again in full, so that every figure below the caps is exact.
	waitingAll, full := waiting.Int64, []int{}
	if byPartition {
		waitingAll = 0
		for _, r := range rows {
			waitingAll += r.waiting.Int64
		}
	}
	for _, p := range slices.Sorted(maps.Keys(rows)) {
		if rows[p].sampled > int64(perPart) {
			full = append(full, p)
		}
	}
	if len(full) > 0 && waitingAll <= sampleCap {
		if err := read(full, sampleCap); err != nil {
			return fail("partitions", err)
		}
	}
	wait := func(since dbtime.Time) time.Duration {
		if since.IsZero() {
			return 0
		}
		return max(st.At.Sub(since.Time), 0)
	}

	// The dead of each partition, when there are at most sampleCap.
	if byPartition && dead.Int64 > 0 && dead.Int64 <= sampleCap {
		for _, ph := range ps {
			ph.Dead = &count{Exact: true}
		}
		args := []any{outbox}
		if n == 2 {
			args = append(args, outbox)
		}
		err = s.query(ctx, `SELECT part, COUNT(*) FROM `+s.limited("part", deadCond, s.deadOrder(), sampleCap)+` GROUP BY part`, args,
			func(scan func(...any) error) error {
				var p int
				var n int64
				err := scan(&p, &n)
				get(p).Dead = &count{N: n, Exact: true}
				return err
			})
		if err != nil {
			return fail("dead messages", err)
		}
	} else if byPartition && dead.Int64 > sampleCap {
		for _, ph := range ps {
			ph.Dead = nil
		}
	}

	st.AllWaitingRead, st.OldestAge.Exact = true, true
	st.Pending = capped(ready.Int64, countCap).add(capped(waiting.Int64, countCap))
	if byPartition {
		st.Pending = exact(0)
	}
	st.Retrying, st.Scheduled = exact(0), exact(0)
	for _, p := range slices.Sorted(maps.Keys(ps)) {
		ph, r := ps[p], rows[p]
		all := r.sampled <= int64(r.sample)
		st.AllWaitingRead = st.AllWaitingRead && all
		// The oldest due ready message is one of those read: all of them, or the age
		// is a lower bound (a message retried or delayed, due later than the one after
		// it, can head the line).
		ph.OldestAge.Exact = r.headRead <= headRows
		st.OldestAge.Exact = st.OldestAge.Exact && ph.OldestAge.Exact
		ph.Retrying, ph.Scheduled = count{N: r.retrying, Exact: all}, count{N: r.scheduled, Exact: all}
		ph.OldestAge.D = max(wait(r.head), wait(r.since))
		if !r.next.IsZero() && !r.next.After(r.at.Time) {
			// Due and not made ready yet (no relay runs): it waited at least since
			// its available_at (since its publication, if it failed before).
			ph.OldestAge.D = max(ph.OldestAge.D, wait(r.next))
		}
		if byPartition {
			ph.Pending = capped(r.ready.Int64, int64(countPerPart)).add(capped(r.waiting.Int64, int64(countPerPart)))
			st.Pending = st.Pending.add(ph.Pending)
		}
		st.Retrying = st.Retrying.add(ph.Retrying)
		st.Scheduled = st.Scheduled.add(ph.Scheduled)
		st.OldestAge.D = max(st.OldestAge.D, ph.OldestAge.D)
		st.Paused = st.Paused || ph.Paused
		if ph.LeaseHeld {
			st.Owners[ph.Owner]++
			st.Owned++
		} else if slices.Contains(parts, p) || slices.Contains(withMsgs, p) {
			// A partition beyond those configured matters only while it holds messages.
			st.Unowned = append(st.Unowned, p)
		}
	}
	st.OldestAge.Exact = st.OldestAge.Exact && st.AllWaitingRead
	for _, p := range slices.Sorted(maps.Keys(ps)) {
		ps[p].OldestAge.Exact = ps[p].OldestAge.Exact && st.AllWaitingRead
		st.Partitions = append(st.Partitions, *ps[p])
	}
	return st, nil
}
