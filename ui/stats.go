package outboxerui

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strconv"
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
	Partition                          int
	Pending, Retrying, Scheduled, Dead count
	OldestAge                          age
	Owner                              string
	LeaseHeld                          bool
	LeaseExpires                       time.Time
	Token                              int64
	Paused                             bool
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
	return "id"
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
// one index probe per partition (a loose index scan on MySQL).
func (s *store) partitionsWithMessages(ctx context.Context, outbox string) ([]int, error) {
	var qs []string
	var args [][]any
	if s.dialect == core.MySQL {
		qs = []string{`SELECT DISTINCT part FROM ` + s.msgs + ` WHERE outbox = ? AND state IN ` + core.StoredPendingStates}
		args = [][]any{{outbox}}
	} else {
		// Ready rows by the index of ready rows, waiting and held ones by the index
		// of blocking rows: both start with (outbox, part).
		for _, pred := range []string{"state = 0", "state IN (3, 4)"} {
			qs = append(qs, `WITH RECURSIVE t(p) AS (SELECT MIN(part) FROM `+s.msgs+` WHERE outbox = ? AND `+pred+
				` UNION ALL SELECT (SELECT MIN(part) FROM `+s.msgs+` WHERE outbox = ? AND `+pred+` AND part > t.p) FROM t WHERE t.p IS NOT NULL)`+
				` SELECT p FROM t WHERE p IS NOT NULL`)
			args = append(args, []any{outbox, outbox})
		}
	}
	var parts []int
	for i, q := range qs {
		err := s.query(ctx, q, args[i], func(scan func(...any) error) error {
			var p int
			err := scan(&p)
			parts = append(parts, p)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("outboxerui: read the partitions of %q: %w", outbox, err)
		}
	}
	return parts, nil
}

// readStats reads the figures of outbox, with every partition in parts (those the lease
// table and the outbox list know of) and any other that holds pending messages.
// byPartition asks for the counts of each partition (the outbox page); without it only
// the outbox's counts are read (the overview), and the partitions' counts are zero.
//
// Every statement reads a bounded part of an index. Counts read at most countCap+1
// entries of an index that holds what they count (pending, dead), without the rows. The
// figures that need the rows (retrying, scheduled, and the dead of each partition) are
// read from sampleCap rows (the waiting and held ones shared among the partitions), and
// are lower bounds when there are more. The oldest due
// message is found by index probes per partition and among those rows.
//
// OldestAge is the longest wait among: the first ready message of each partition (the
// lowest ID, which the relay delivers first), the first waiting message of each
// partition when it is already due, and the waiting and held messages read (a failed
// one waits since it was published, as core.Health counts it). That is core.Health's
// OldestAge when every waiting and held message was read (AllWaitingRead), unless a
// message scheduled earlier became due after a later one of its partition: then the
// page shows the wait of the first in line. With more, it is a lower bound.
func (s *store) readStats(ctx context.Context, outbox string, parts []int, ls []lease, byPartition bool) (outboxStats, error) {
	st := outboxStats{Outbox: outbox, Owners: map[string]int{}, Unowned: []int{}}
	ps := map[int]*partStats{}
	get := func(p int) *partStats {
		if ph, ok := ps[p]; ok {
			return ph
		}
		ph := &partStats{Partition: p, Pending: exact(0), Retrying: exact(0), Scheduled: exact(0), Dead: exact(0)}
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
	wait := func(since dbtime.Time) time.Duration {
		if since.IsZero() {
			return 0
		}
		return max(st.At.Sub(since.Time), 0)
	}
	fail := func(what string, err error) (outboxStats, error) {
		return outboxStats{}, fmt.Errorf("outboxerui: read the %s of %q: %w", what, outbox, err)
	}

	// Per partition: the head of the line of ready messages, when the first waiting
	// message is due, and on the outbox page a count of the ready ones.
	due := s.dueSince()
	readyCount := `NULL`
	if byPartition {
		readyCount = `(SELECT COUNT(*) FROM ` + s.limited("1", "outbox = ? AND part = ? AND state = 0", "id", countCap) + `)`
	}
	q := s.p(`SELECT ` + readyCount + `, ` +
		`(SELECT ` + s.timeCol(due) + ` FROM ` + s.msgs + ` WHERE outbox = ? AND part = ? AND state = 0 ORDER BY id LIMIT 1), ` +
		`(SELECT ` + s.timeCol(`MIN(available_at)`) + ` FROM ` + s.msgs + ` WHERE outbox = ? AND part = ? AND state = 3), ` +
		s.timeCol(s.now()))
	ages := map[int]time.Duration{}
	var ready count
	ready.Exact = true
	for _, p := range slices.Sorted(maps.Keys(ps)) {
		args := []any{outbox, p, outbox, p}
		if byPartition {
			args = append([]any{outbox, p}, args...)
		}
		var (
			n               sql.NullInt64
			head, next, now dbtime.Time
		)
		if err := s.db.QueryRowContext(ctx, q, args...).Scan(&n, &head, &next, &now); err != nil {
			return fail(fmt.Sprintf("partition %d", p), err)
		}
		if st.At.IsZero() {
			st.At = now.Time
		}
		ages[p] = wait(head)
		if !next.IsZero() && !next.After(now.Time) {
			// Due and not made ready yet (no relay runs): it waited at least since
			// its available_at (since its publication, if it failed before).
			ages[p] = max(ages[p], wait(next))
		}
		if byPartition {
			ps[p].Pending = capped(n.Int64, countCap)
			ready = ready.add(ps[p].Pending)
		}
	}
	if !byPartition {
		var n int64
		err := s.db.QueryRowContext(ctx, s.p(`SELECT COUNT(*) FROM `+s.limited("1", "outbox = ? AND state = 0", "part, id", countCap)), outbox).Scan(&n)
		if err != nil {
			return fail("ready messages", err)
		}
		ready = capped(n, countCap)
	}

	// Waiting and held messages: counted on their index, by partition; retrying,
	// scheduled and their waits from sampleCap of them.
	waiting, total := map[int]int64{}, int64(0)
	err = s.query(ctx, `SELECT part, COUNT(*) FROM `+s.limited("part", "outbox = ? AND state IN (3, 4)", s.waitingOrder(), countCap)+` GROUP BY part`,
		[]any{outbox}, func(scan func(...any) error) error {
			var p int
			var n int64
			err := scan(&p, &n)
			waiting[p] = n
			total += n
			return err
		})
	if err != nil {
		return fail("waiting messages", err)
	}
	waitingExact := total <= countCap
	// The rows read per partition: sampleCap in all, so that every partition's
	// figures are read.
	perPart := max(sampleCap/len(ps), 100)
	sample := s.p(`SELECT COUNT(*), ` +
		`COALESCE(SUM(CASE WHEN attempts > 0 THEN 1 ELSE 0 END), 0), ` +
		`COALESCE(SUM(CASE WHEN state = 3 AND attempts = 0 AND available_at > ` + s.now() + ` THEN 1 ELSE 0 END), 0), ` +
		s.timeCol(`MIN(`+due+`)`) +
		` FROM ` + s.limited("state, attempts, available_at, created_at", "outbox = ? AND part = ? AND state IN (3, 4)", s.waitingOrder(), perPart))
	st.AllWaitingRead = true
	for _, p := range slices.Sorted(maps.Keys(ps)) {
		var (
			n, retry, scheduled int64
			since               dbtime.Time
		)
		if err := s.db.QueryRowContext(ctx, sample, outbox, p).Scan(&n, &retry, &scheduled, &since); err != nil {
			return fail("waiting messages", err)
		}
		all := n <= int64(perPart)
		st.AllWaitingRead = st.AllWaitingRead && all
		ps[p].Retrying, ps[p].Scheduled = count{N: retry, Exact: all}, count{N: scheduled, Exact: all}
		ages[p] = max(ages[p], wait(since))
	}

	// Dead messages: counted on their index; on the outbox page, by partition from at
	// most sampleCap+1 of them.
	var dead int64
	err = s.db.QueryRowContext(ctx, s.p(`SELECT COUNT(*) FROM `+s.limited("1", "outbox = ? AND state = 2", s.deadOrder(), countCap)), outbox).Scan(&dead)
	if err != nil {
		return fail("dead messages", err)
	}
	st.Dead = capped(dead, countCap)
	if byPartition && dead > 0 {
		err = s.query(ctx, `SELECT part, COUNT(*) FROM `+s.limited("part", "outbox = ? AND state = 2", s.deadOrder(), sampleCap)+` GROUP BY part`,
			[]any{outbox}, func(scan func(...any) error) error {
				var p int
				var n int64
				err := scan(&p, &n)
				get(p).Dead = count{N: n, Exact: dead <= sampleCap}
				return err
			})
		if err != nil {
			return fail("dead messages", err)
		}
	}

	st.Pending = ready.add(capped(total, countCap))
	st.Retrying, st.Scheduled = exact(0), exact(0)
	st.OldestAge = age{Exact: st.AllWaitingRead}
	for _, p := range slices.Sorted(maps.Keys(ps)) {
		ph := ps[p]
		st.Retrying = st.Retrying.add(ph.Retrying)
		st.Scheduled = st.Scheduled.add(ph.Scheduled)
		ph.OldestAge = age{D: ages[p], Exact: st.AllWaitingRead}
		st.OldestAge.D = max(st.OldestAge.D, ages[p])
		if byPartition {
			ph.Pending = ph.Pending.add(count{N: waiting[p], Exact: waitingExact})
		}
		st.Paused = st.Paused || ph.Paused
		if ph.LeaseHeld {
			st.Owners[ph.Owner]++
			st.Owned++
		} else if slices.Contains(parts, p) || slices.Contains(withMsgs, p) {
			// A partition beyond those configured matters only while it holds messages.
			st.Unowned = append(st.Unowned, p)
		}
		st.Partitions = append(st.Partitions, *ph)
	}
	return st, nil
}
