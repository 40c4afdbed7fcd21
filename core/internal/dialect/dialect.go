// Package dialect writes the SQL of the outbox for PostgreSQL, SQLite and MySQL/MariaDB.
// It knows table layout and syntax; it runs nothing.
package dialect

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// Kind is a SQL dialect.
type Kind int

// The dialects.
const (
	Postgres Kind = iota
	SQLite
	MySQL
)

// The values of the state column. A pending message is ready, waiting or held; Fetch
// reads ready rows only, so rows that cannot go now cost a fetch nothing.
const (
	// Ready rows are due and can be delivered once the earlier rows of their group are.
	Ready = 0
	// Delivered rows are kept for their retention (KeepFor).
	Delivered = 1
	// Dead rows failed for the last time.
	Dead = 2
	// Waiting rows are scheduled, or wait for a retry, until available_at; Promote makes
	// the due ones ready.
	Waiting = 3
	// Held rows are grouped rows behind an earlier waiting or held row of their group;
	// Release makes them ready when the rows ahead of them are resolved.
	Held = 4
)

// ShapePart is the part of the lease row that records an outbox's shape.
const ShapePart = -1

// PendingStates is the parenthesised list of the states of a pending message, for
// "state IN PendingStates": every statement that reads the backlog uses it.
const PendingStates = "(0, 3, 4)"

// blockingStates are the states of a row that holds back the later rows of its group.
const blockingStates = "(3, 4)"

// readyOfGroup is the predicate of the index of a group's ready rows (PostgreSQL, SQLite;
// MySQL's index of blocking rows holds every state), and the condition on the state that
// the statements reading by it state. It says "state < 1", not "state = 0", for the
// planners: without statistics (a backlog just written) PostgreSQL weighs an index of the
// partition's ready rows and one of a group's alike, and a probe for a group's ready
// rows in an ID range that it ran by the partition's read every ready row of the range.
// No statement of the partition's ready rows says "state < 1", and the group comes first
// in this index, so neither index serves the other's statements.
const readyOfGroup = "state < 1"

// SQL holds the statements of one message table (and its lease table) in one dialect.
// Statements are written with ? placeholders and rewritten for PostgreSQL once.
type SQL struct {
	Kind Kind
	// Messages and Leases are the quoted, qualified table names; Nodes is the table of
	// the running relay nodes (membership).
	Messages, Leases, Locks, Nodes string
	// Table and Schema as given (unquoted), for index names and notification channels.
	Table, Schema string

	// Fixed statements.
	AcquireLease, ReadLease, RenewLease, ReleaseLease, EnsureLease, FenceLease string
	Pause, Resume, CountLeases, DropLeasesFrom, AnyPaused, ClaimLeases         string
	FailMessage, KillMessage                                                   string
	Counts, ListPending, ListDead, RetryDeadAll, Prune, PartitionsInUse        string
	LeaseStatus, MovePartitions, NotifyChannel                                 string
	// Promote makes the partition's due waiting rows ready; NextDue reads how long until
	// the next waiting row is due (microseconds, NULL when none waits).
	Promote, NextDue string
	// LockLeases locks the lease rows of an outbox (not SQLite: it has one writer).
	LockLeases string
	// LiveLeases counts the lease rows of an outbox held by some owner and not run out.
	// Placement reads id, group_key and part of an outbox's pending rows; Strays those
	// of its pending rows in partitions at or beyond a count, oldest first, at most a
	// thousand.
	LiveLeases, Placement, Strays, AwaitLease string
	// ReadShape reads the partition count and the shape row's text (NULL when there is
	// none) of an outbox; EnsureShape creates the shape row, SetShape changes its text.
	ReadShape, EnsureShape, SetShape string
	// Membership. Heartbeat records a node of an outbox as live for a number of
	// microseconds from the database clock (arguments: outbox, node, max partitions,
	// microseconds); the node's join time is the database clock of the heartbeat that
	// made it live, kept by the next ones while its row has not run out. LiveNodes lists
	// the live nodes of an outbox (node, max partitions, join time, last heartbeat,
	// database clock); LeaveNode forgets a node (outbox, node);
	// ExpiredNodes lists the nodes of an outbox whose heartbeat ran out (outbox), without
	// locking; ForgetNode deletes one of them by its key (outbox, node), so that a row
	// locked by someone else's transaction blocks no other node's row.
	Heartbeat, LiveNodes, LeaveNode, ExpiredNodes, ForgetNode string
	// FreeLeases lists the partitions of an outbox whose lease is free (released, or run
	// out).
	FreeLeases string

	// inserts caches the INSERT statements of up to cachedRows rows: a publish builds
	// none of its SQL text, and PostgreSQL drivers find their prepared statement by it.
	inserts sync.Map // insertKey → string
}

// cachedRows bounds the row counts whose INSERT text is kept (a statement of n rows is
// about 40·n bytes; larger batches are rare and build theirs).
const cachedRows = 64

type insertKey struct {
	n                      int
	delayed, notify, timed bool
}

// New returns the statements for table (and schema, PostgreSQL only) in kind.
// table and schema must already be validated identifiers.
func New(kind Kind, schema, table string) *SQL {
	s := &SQL{Kind: kind, Table: table, Schema: schema}
	s.Messages = s.qualified(table)
	s.Leases = s.qualified(table + "_leases")
	s.Locks = s.qualified(table + "_locks")
	s.Nodes = s.qualified(table + "_nodes")
	s.NotifyChannel = "outboxer." + strings.TrimPrefix(schema+"."+table, ".")
	if len(s.NotifyChannel) > 63 {
		s.NotifyChannel = s.NotifyChannel[:63]
	}
	now := s.Now()
	cols := s.envelopeColumns()

	// EnsureLease creates a partition's row. Run creates rows with token 0; Pause on an
	// outbox that never ran creates them with token -1, so that they do not count as
	// partitions a run had (CountLeases), until a run claims them (ClaimLeases).
	s.EnsureLease = s.p(s.insertIgnore(s.Leases, "outbox, part, owner, token, expires_at, paused", "?, ?, '', ?, "+s.zeroTime()+", ?"))
	s.ClaimLeases = s.p(`UPDATE ` + s.Leases + ` SET token = 0 WHERE outbox = ? AND part >= 0 AND part < ? AND token < 0`)
	// AcquireLease takes a lapsed lease, and does not wait for a lease row another
	// transaction has locked (a confirming one, of a holder that may be frozen in it): the
	// partition is not free now, and a worker waiting for that row would keep the node's
	// place for a partition from the other free ones (MySQL: error 1205 at once, which the
	// worker reads as not taken; PostgreSQL: no row).
	s.AcquireLease = s.p(`UPDATE ` + s.Leases + ` SET owner = ?, token = token + 1, expires_at = ` + s.NowPlus("?") +
		` WHERE outbox = ? AND part = ? AND expires_at < ` + now)
	// AwaitLease is AcquireLease that waits for a locked row (Drain: an administrative
	// transaction, such as a discard, holds the lease rows for a moment).
	s.AwaitLease = s.AcquireLease
	switch kind {
	case MySQL:
		s.AcquireLease = `SET STATEMENT innodb_lock_wait_timeout = 0 FOR ` + s.AcquireLease
	case Postgres:
		s.AcquireLease = s.p(`UPDATE ` + s.Leases + ` AS l SET owner = ?, token = l.token + 1, expires_at = ` + s.NowPlus("?") +
			` FROM (SELECT outbox, part FROM ` + s.Leases + ` WHERE outbox = ? AND part = ? AND expires_at < ` + now +
			` FOR UPDATE SKIP LOCKED) AS f WHERE l.outbox = f.outbox AND l.part = f.part`)
	}
	s.ReadLease = s.p(`SELECT token, paused FROM ` + s.Leases + ` WHERE outbox = ? AND part = ? AND owner = ?`)
	s.RenewLease = s.p(`UPDATE ` + s.Leases + ` SET expires_at = ` + s.NowPlus("?") + ` WHERE outbox = ? AND part = ? AND token = ? AND owner = ?`)
	// FenceLease is RenewLease as the first statement of a confirming transaction: it
	// locks the lease row, so a takeover waits for the commit or the confirm sees it.
	s.FenceLease = s.RenewLease
	s.ReleaseLease = s.p(`UPDATE ` + s.Leases + ` SET owner = '', expires_at = ` + s.zeroTime() + ` WHERE outbox = ? AND part = ? AND owner = ?`)
	s.Pause = s.p(`UPDATE ` + s.Leases + ` SET paused = ` + s.bool(true) + ` WHERE outbox = ?`)
	s.Resume = s.p(`UPDATE ` + s.Leases + ` SET paused = ` + s.bool(false) + ` WHERE outbox = ?`)
	// The partitions the last run had: rows made by Pause on an outbox that never ran do
	// not count.
	s.CountLeases = s.p(`SELECT COUNT(*) FROM ` + s.Leases + ` WHERE outbox = ? AND part >= 0 AND token >= 0`)
	s.AnyPaused = s.p(`SELECT COUNT(*) FROM ` + s.Leases + ` WHERE outbox = ? AND paused = ` + s.bool(true))
	s.DropLeasesFrom = s.p(`DELETE FROM ` + s.Leases + ` WHERE outbox = ? AND part >= ?`)
	s.LeaseStatus = s.p(`SELECT part, owner, token, ` + s.TimeCol("expires_at") + `, paused, ` + s.TimeCol(now) + ` FROM ` + s.Leases +
		` WHERE outbox = ? AND part >= 0 ORDER BY part`)

	s.FailMessage = s.p(`UPDATE ` + s.Messages + ` SET attempts = attempts + 1, last_error = ?, available_at = ` + s.NowPlus("?") +
		`, state = ` + strconv.Itoa(Waiting) + ` WHERE id = ? AND state = 0 AND attempts = ?`)
	s.KillMessage = s.p(`UPDATE ` + s.Messages + ` SET attempts = attempts + 1, last_error = ?, state = 2` +
		` WHERE id = ? AND state = 0 AND attempts = ?`)

	s.Counts = s.p(`SELECT state, COUNT(*) FROM ` + s.Messages + ` WHERE outbox = ? GROUP BY state`)
	s.ListPending = s.p(`SELECT ` + cols + ` FROM ` + s.Messages + ` WHERE outbox = ? AND state IN ` + PendingStates + ` ORDER BY id LIMIT ?`)
	s.ListDead = s.p(`SELECT ` + cols + ` FROM ` + s.Messages + ` WHERE outbox = ? AND state = 2 ORDER BY id LIMIT ?`)
	s.RetryDeadAll = s.p(`UPDATE ` + s.Messages + ` SET state = 0, attempts = 0, available_at = ` + now + ` WHERE outbox = ? AND state = 2`)
	s.PartitionsInUse = s.p(`SELECT DISTINCT part FROM ` + s.Messages + ` WHERE outbox = ? AND state IN ` + PendingStates + ` AND part >= ?`)
	s.MovePartitions = s.p(`UPDATE ` + s.Messages + ` SET part = MOD(part, ?) WHERE outbox = ? AND state IN ` + PendingStates + ` AND part >= ?`)
	s.LockLeases = s.p(`SELECT part FROM ` + s.Leases + ` WHERE outbox = ? ORDER BY part FOR UPDATE`)
	// The shape row (part ShapePart) records what the nodes of an outbox must agree on
	// besides the partition count, which the partitions' own rows record: in its owner
	// column, as text (see core's shape.go). Its token is -1 and it never expires, so it
	// counts neither as a partition nor as a live lease.
	s.ReadShape = s.p(`SELECT (SELECT COUNT(*) FROM ` + s.Leases + ` WHERE outbox = ? AND part >= 0 AND token >= 0), ` +
		`(SELECT owner FROM ` + s.Leases + ` WHERE outbox = ? AND part = ` + strconv.Itoa(ShapePart) + `)`)
	s.EnsureShape = s.p(s.insertIgnore(s.Leases, "outbox, part, owner, token, expires_at, paused", "?, "+strconv.Itoa(ShapePart)+", ?, -1, "+s.zeroTime()+", "+s.bool(false)))
	s.SetShape = s.p(`UPDATE ` + s.Leases + ` SET owner = ? WHERE outbox = ? AND part = ` + strconv.Itoa(ShapePart))
	s.LiveLeases = s.p(`SELECT COUNT(*) FROM ` + s.Leases + ` WHERE outbox = ? AND owner <> '' AND expires_at > ` + now)
	s.Placement = s.p(`SELECT id, group_key, part FROM ` + s.Messages + ` WHERE outbox = ? AND state IN ` + PendingStates)
	// The sweep runs every quarter lease: on PostgreSQL the states as alternatives, one
	// per partial index, which it reads by the partition range (with "IN", and without
	// statistics, it reads the whole table, backlogs included).
	pending := `state IN ` + PendingStates
	if kind == Postgres {
		pending = `(state = 0 OR state = 3 OR state = 4)`
	}
	s.Strays = s.p(`SELECT id, group_key, part FROM ` + s.Messages + ` WHERE outbox = ? AND ` + pending +
		` AND part >= ? ORDER BY id LIMIT 1000`)
	s.Promote = s.p(`UPDATE ` + s.Messages + ` SET state = ` + strconv.Itoa(Ready) + ` WHERE outbox = ? AND state = ` + strconv.Itoa(Waiting) +
		` AND part = ? AND available_at <= ` + now)
	// The first waiting row by the index, not MIN(available_at): with no statistics yet
	// (a backlog just written), PostgreSQL computes MIN by reading every waiting row.
	s.NextDue = s.p(`SELECT ` + s.micros(`(SELECT available_at FROM `+s.Messages+` WHERE outbox = ? AND state = `+strconv.Itoa(Waiting)+
		` AND part = ? ORDER BY available_at LIMIT 1)`) + ` - ` + s.micros(now))
	s.Heartbeat = s.heartbeat()
	s.LiveNodes = s.p(`SELECT node, max_parts, ` + s.TimeCol("joined_at") + `, ` + s.TimeCol("seen_at") + `, ` + s.TimeCol(now) + ` FROM ` + s.Nodes +
		` WHERE outbox = ? AND expires_at > ` + now)
	s.FreeLeases = s.p(`SELECT part FROM ` + s.Leases + ` WHERE outbox = ? AND part >= 0 AND expires_at < ` + now + ` ORDER BY part`)
	s.LeaveNode = s.p(`DELETE FROM ` + s.Nodes + ` WHERE outbox = ? AND node = ?`)
	s.ExpiredNodes = s.p(`SELECT node FROM ` + s.Nodes + ` WHERE outbox = ? AND expires_at <= ` + now)
	s.ForgetNode = s.p(`DELETE FROM ` + s.Nodes + ` WHERE outbox = ? AND node = ? AND expires_at <= ` + now)
	switch kind {
	case MySQL:
		s.Prune = s.p(`DELETE FROM ` + s.Messages + ` WHERE outbox = ? AND state = 1 AND delivered_at < ` + s.NowPlus("?") + ` LIMIT 5000`)
	default:
		s.Prune = s.p(`DELETE FROM ` + s.Messages + ` WHERE id IN (SELECT id FROM ` + s.Messages +
			` WHERE outbox = ? AND state = 1 AND delivered_at < ` + s.NowPlus("?") + ` LIMIT 5000)`)
	}
	return s
}

// heartbeat inserts or refreshes a node's row. The join time is set when the row is
// inserted, and again when the row had run out (the node was forgotten, whether or not
// its row was deleted yet): a node is a member from the heartbeat that made it live.
func (s *SQL) heartbeat() string {
	now := s.Now()
	cols := ` (outbox, node, max_parts, joined_at, seen_at, expires_at) VALUES (?, ?, ?, ` + now + `, ` + now + `, ` + s.NowPlus("?") + `)`
	if s.Kind == MySQL {
		// MySQL assigns in order, each seeing the ones before: joined_at goes first, to
		// test the old expires_at.
		return `INSERT INTO ` + s.Nodes + cols + ` ON DUPLICATE KEY UPDATE` +
			` joined_at = IF(expires_at > VALUES(seen_at), joined_at, VALUES(joined_at)),` +
			` max_parts = VALUES(max_parts), seen_at = VALUES(seen_at), expires_at = VALUES(expires_at)`
	}
	return s.p(`INSERT INTO ` + s.Nodes + ` AS n` + cols + ` ON CONFLICT (outbox, node) DO UPDATE SET` +
		` joined_at = CASE WHEN n.expires_at > excluded.seen_at THEN n.joined_at ELSE excluded.joined_at END,` +
		` max_parts = excluded.max_parts, seen_at = excluded.seen_at, expires_at = excluded.expires_at`)
}

// Quote quotes an identifier.
func (s *SQL) Quote(name string) string {
	if s.Kind == MySQL {
		return "`" + name + "`"
	}
	return `"` + name + `"`
}

func (s *SQL) qualified(name string) string {
	if s.Schema != "" {
		return s.Quote(s.Schema) + "." + s.Quote(name)
	}
	return s.Quote(name)
}

// p rewrites ? placeholders into $1, $2, … for PostgreSQL.
func (s *SQL) p(q string) string {
	if s.Kind != Postgres {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 3*strings.Count(q, "?"))
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// Now is the database clock in the type of the time columns.
func (s *SQL) Now() string {
	switch s.Kind {
	case SQLite:
		return `CAST(unixepoch('subsec') * 1000000 AS INTEGER)`
	case MySQL:
		return `UTC_TIMESTAMP(6)`
	}
	return `now()`
}

// sqliteNowDefault is the SQLite clock in microseconds for the time columns' defaults,
// which the writer's SQLite evaluates, not the engine's: unixepoch('subsec') (Now) needs
// SQLite 3.42 and gives NULL before it, so a writer on an older SQLite (Debian 12's, that
// of its python3 and sqlite3) could not insert. julianday('now') is in every SQLite, a
// day count in floating point: rounded to the millisecond, the clock's resolution, it
// gives the value unixepoch('subsec') gives, to the microsecond.
const sqliteNowDefault = `CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER) * 1000`

// NowPlus is the database clock plus a number of microseconds (an expression or placeholder).
func (s *SQL) NowPlus(micros string) string {
	switch s.Kind {
	case SQLite:
		return `(` + s.Now() + ` + ` + micros + `)`
	case MySQL:
		return `(UTC_TIMESTAMP(6) + INTERVAL ` + micros + ` MICROSECOND)`
	}
	return `(now() + ` + micros + `::bigint * interval '1 microsecond')`
}

func (s *SQL) zeroTime() string {
	switch s.Kind {
	case SQLite:
		return `0`
	case MySQL:
		return `'1970-01-01 00:00:00'`
	}
	return `'epoch'::timestamptz`
}

func (s *SQL) bool(v bool) string {
	if s.Kind == Postgres {
		return strconv.FormatBool(v)
	}
	if v {
		return "1"
	}
	return "0"
}

// TimeCol is a select expression for a time column that scans into a time.Time
// (PostgreSQL) or into microseconds since the epoch (SQLite, MySQL).
func (s *SQL) TimeCol(col string) string {
	if s.Kind == MySQL {
		return `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ` + col + `)`
	}
	return col
}

func (s *SQL) insertIgnore(table, cols, values string) string {
	switch s.Kind {
	case MySQL:
		return `INSERT IGNORE INTO ` + table + ` (` + cols + `) VALUES (` + values + `)`
	}
	return `INSERT INTO ` + table + ` (` + cols + `) VALUES (` + values + `) ON CONFLICT DO NOTHING`
}

// envelopeColumns are the columns of a stored envelope, in the order core's scanEnvelope reads them.
func (s *SQL) envelopeColumns() string {
	return `id, outbox, type, group_key, part, payload, headers, state, attempts, last_error, ` +
		s.TimeCol("created_at") + `, ` + s.TimeCol("available_at")
}

// Insert returns an INSERT of n rows that returns id and created_at per row, and with
// delayed also available_at. Each row takes (outbox, type, group_key, part, payload,
// headers), and with delayed also its state (Waiting when scheduled, Ready otherwise) and
// a delay in microseconds, counted from the database clock at the insert; without it,
// the column defaults give created_at and available_at the same value (the database
// clock at the start of the transaction on PostgreSQL, of the statement on MariaDB), so
// the statement neither sends nor reads back the second.
// With notify, the statement also sends one notification on NotifyChannel with the
// given payload (PostgreSQL only; notifications are sent at commit, once per payload).
func (s *SQL) Insert(n int, delayed, notify bool) string {
	return s.cached(insertKey{n: n, delayed: delayed, notify: notify}, func() string { return s.insert(n, delayed, notify) })
}

// cached returns the statement of k, building it with build once for small row counts.
func (s *SQL) cached(k insertKey, build func() string) string {
	if k.n > cachedRows {
		return build()
	}
	if q, ok := s.inserts.Load(k); ok {
		return q.(string)
	}
	q := build()
	s.inserts.Store(k, q)
	return q
}

func (s *SQL) insert(n int, delayed, notify bool) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO `)
	b.WriteString(s.Messages)
	row := `(?, ?, ?, ?, ?, ?)`
	if delayed {
		b.WriteString(` (outbox, type, group_key, part, payload, headers, state, created_at, available_at) VALUES `)
		row = `(?, ?, ?, ?, ?, ?, ?, ` + s.Now() + `, ` + s.insertPlus("?") + `)`
	} else {
		b.WriteString(` (outbox, type, group_key, part, payload, headers) VALUES `)
	}
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	b.WriteString(` RETURNING id, ` + s.TimeCol("created_at"))
	if delayed {
		b.WriteString(`, ` + s.TimeCol("available_at"))
	}
	if notify && s.Kind == Postgres {
		b.WriteString(`, pg_notify(?, ?) IS NULL`)
	}
	return s.p(b.String())
}

// insertPlus is the database clock at the insert plus a number of microseconds. On
// PostgreSQL now() is the start of the transaction, which may be long before the
// insert: a delay counts from the statement's clock.
func (s *SQL) insertPlus(micros string) string {
	if s.Kind == Postgres {
		return `(clock_timestamp() + ` + micros + `::bigint * interval '1 microsecond')`
	}
	return s.NowPlus(micros)
}

// micros is a time expression in microseconds since the epoch.
func (s *SQL) micros(t string) string {
	switch s.Kind {
	case SQLite:
		return t
	case MySQL:
		return `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ` + t + `)`
	}
	return `CAST(EXTRACT(EPOCH FROM ` + t + `) * 1000000 AS bigint)`
}

// InsertTimed (SQLite) returns an INSERT of n rows, each taking (outbox, type, group_key,
// part, payload, headers, state, created_at, available_at) with the times in microseconds, that
// returns nothing: SQLite has one writer, so the rows of one statement get consecutive
// IDs ending at the last insert ID, and its clock is this process's clock.
func (s *SQL) InsertTimed(n int) string {
	return s.cached(insertKey{n: n, timed: true}, func() string { return s.insertTimed(n) })
}

func (s *SQL) insertTimed(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO ` + s.Messages + ` (outbox, type, group_key, part, payload, headers, state, created_at, available_at) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(`(?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	}
	return b.String()
}

// SerializeLock takes a transaction-scoped lock on a 64-bit key, or is "" where the
// dialect needs none (SQLite has a single writer).
func (s *SQL) SerializeLock() string {
	switch s.Kind {
	case Postgres:
		return s.p(`SELECT pg_advisory_xact_lock(?)`)
	case MySQL:
		// InnoDB holds the row lock of an upserted row until the transaction ends,
		// which is what a transaction-scoped advisory lock gives on PostgreSQL.
		return `INSERT INTO ` + s.Locks + ` (lock_key) VALUES (?) ON DUPLICATE KEY UPDATE lock_key = lock_key`
	}
	return ""
}

// Mode is the ordering a fetch keeps.
type Mode int

// The modes.
const (
	Grouped   Mode = iota // per group key; unordered messages flow freely
	Total                 // the whole partition is one group
	Unordered             // nothing blocks
)

// Fetch returns the query for the next ready messages of a partition in ID order, and
// its arguments. The columns are id, type, group_key, payload, headers, attempts,
// last_error, created_at, available_at (what the caller does not know already), then
// whether the row is behind an earlier waiting or held row of its group (of the
// partition, in Total mode), then the database clock. A row behind must not be delivered
// now: the caller holds it (Hold), and it costs no later fetch anything.
func (s *SQL) Fetch(outbox string, part, limit int, mode Mode) (string, []any) {
	q, args := s.fetch(outbox, part, limit, mode, "", nil)
	return s.p(q), args
}

// fetch is Fetch's query with ? placeholders and a further condition on its rows m.
func (s *SQL) fetch(outbox string, part, limit int, mode Mode, cond string, condArgs []any) (string, []any) {
	args := append(append([]any{outbox, part}, condArgs...), limit)
	now := s.Now()
	behind := `0`
	switch mode {
	case Grouped:
		behind = `(m.group_key <> '' AND ` + s.behind(true) + `)`
	case Total:
		behind = s.behind(false)
	}
	table := s.Messages + ` AS m`
	if s.Kind == MySQL {
		// Without fresh statistics MariaDB walks the primary key in ID order, through
		// every waiting and held row older than the ready ones.
		table += ` FORCE INDEX (` + s.Quote(s.Table+"_pending") + `)`
	}
	return `SELECT id, type, group_key, payload, headers, attempts, last_error, ` + s.TimeCol("created_at") + ` AS created, ` +
		s.TimeCol("available_at") + ` AS available, ` + behind + ` AS behind, ` + s.TimeCol(now) + ` AS db_now` +
		` FROM ` + table + ` WHERE outbox = ? AND state = 0 AND part = ?` + cond + ` ORDER BY id LIMIT ?`, args
}

// Range is a range of message IDs, both ends included.
type Range struct{ From, To int64 }

// FetchAround is Fetch (Grouped) that leaves out the ready rows in the given ID ranges
// (ascending, disjoint: rows set aside behind a blocked head, not read one fetch after
// another), and, past a range, every row whose group has a ready row in it, which must
// go first. The ranges' rows are read again once the ranges are gone. The query is a
// union of the stretches between the ranges, each read by the index of ready rows in ID
// order, none stepping through a range.
func (s *SQL) FetchAround(outbox string, part, limit int, skip []Range) (string, []any) {
	if len(skip) == 0 {
		return s.Fetch(outbox, part, limit, Grouped)
	}
	var b strings.Builder
	var args []any
	for i := 0; i <= len(skip); i++ {
		var cond strings.Builder
		var more []any
		if i > 0 {
			cond.WriteString(` AND m.id > ?`)
			more = append(more, skip[i-1].To)
		}
		if i < len(skip) {
			cond.WriteString(` AND m.id < ?`)
			more = append(more, skip[i].From)
		}
		if i > 0 {
			cond.WriteString(` AND (m.group_key = '' OR (`)
			for j, r := range skip[:i] {
				if j > 0 {
					cond.WriteString(` AND `)
				}
				cond.WriteString(s.noneReadyIn())
				more = append(more, r.From, r.To)
			}
			cond.WriteString(`))`)
		}
		q, a := s.fetch(outbox, part, limit, Grouped, cond.String(), more)
		if i > 0 {
			b.WriteString(` UNION ALL `)
		}
		fmt.Fprintf(&b, `SELECT * FROM (%s) AS f%d`, q, i)
		args = append(args, a...)
	}
	b.WriteString(` ORDER BY id LIMIT ?`)
	return s.p(b.String()), append(args, limit)
}

// noneReadyIn is a condition on a row m, with the two ends of an ID range as arguments:
// no ready row of its group lies in the range.
func (s *SQL) noneReadyIn() string {
	table := s.Messages + ` AS r`
	if s.Kind == MySQL {
		table += ` FORCE INDEX (` + s.Quote(s.Table+"_blocking") + `)`
	}
	probe := `SELECT 1 FROM ` + table + ` WHERE r.group_key = m.group_key AND r.outbox = m.outbox AND r.part = m.part` +
		` AND ` + s.readyInGroup("r") + ` AND r.id BETWEEN ? AND ?`
	if s.Kind == MySQL {
		// A row's probe, by the index: MariaDB makes a NOT EXISTS an anti-join it may
		// run by reading the whole index once (every held and ready row of the table).
		return `(` + probe + ` LIMIT 1) IS NULL`
	}
	return `NOT EXISTS (` + probe + `)`
}

// readyInGroup is the condition on the state of a row (alias a) that reads a group's
// ready rows by their index.
func (s *SQL) readyInGroup(a string) string {
	if s.Kind == MySQL {
		return a + `.state = 0`
	}
	return a + `.` + readyOfGroup
}

// Aside returns the query for the ready rows of a group behind its first waiting or held
// row, from ID from on, in ID order, at most limit: the rows to set aside next. Each row
// also gives the group's last ready ID. No row: nothing of the group is behind.
func (s *SQL) Aside(outbox string, part int, group string, from int64, limit int) (string, []any) {
	table := func(alias string) string {
		t := s.Messages + ` AS ` + alias
		if s.Kind == MySQL {
			t += ` FORCE INDEX (` + s.Quote(s.Table+"_blocking") + `)`
		}
		return t
	}
	of := func(a string) string {
		return a + `.group_key = ? AND ` + a + `.outbox = ? AND ` + a + `.part = ?`
	}
	// The first and last rows by ORDER BY and LIMIT, not MIN and MAX: without statistics
	// PostgreSQL computes those by reading every row of the group.
	first := `(SELECT b.id FROM ` + table("b") + ` WHERE ` + of("b") + ` AND b.state IN ` + blockingStates + ` ORDER BY b.id LIMIT 1)`
	firstArgs := []any{group, outbox, part}
	if s.Kind == MySQL {
		// By the index, one row a state: MIN over both states reads every held row.
		one := func(state int) string {
			return `(SELECT b.id FROM ` + table("b") + ` WHERE ` + of("b") + ` AND b.state = ` + strconv.Itoa(state) + ` ORDER BY b.id LIMIT 1)`
		}
		w, h := one(Waiting), one(Held)
		first = `LEAST(COALESCE(` + w + `, ` + h + `), COALESCE(` + h + `, ` + w + `))`
		firstArgs = []any{group, outbox, part, group, outbox, part, group, outbox, part, group, outbox, part}
	}
	q := `SELECT m.id, (SELECT l.id FROM ` + table("l") + ` WHERE ` + of("l") + ` AND ` + s.readyInGroup("l") + ` ORDER BY l.id DESC LIMIT 1)` +
		` FROM ` + table("m") + ` WHERE ` + of("m") + ` AND ` + s.readyInGroup("m") + ` AND m.id >= ? AND m.id > ` + first + ` ORDER BY m.id LIMIT ?`
	args := append([]any{group, outbox, part, group, outbox, part, from}, firstArgs...)
	return s.p(q), append(args, limit)
}

// behind is a condition on a row m: an earlier row of its group (or of its partition,
// without grouped) waits or is held.
func (s *SQL) behind(grouped bool) string {
	if s.Kind == MySQL {
		return s.behindMySQL(grouped)
	}
	g := ``
	if grouped {
		g = ` AND b.group_key = m.group_key`
	}
	return `EXISTS (SELECT 1 FROM ` + s.Messages + ` AS b WHERE b.outbox = m.outbox AND b.part = m.part` + g +
		` AND b.state IN ` + blockingStates + ` AND b.id < m.id)`
}

// behindMySQL is behind on MySQL, which has no partial indexes: its indexes hold the
// rows of every state, and a probe for "an earlier waiting or held row" by EXISTS reads
// every row of the group (or partition) ahead of the first waiting one, ready ones
// included: with a poisoned group of n ready rows, each of them read the n others. The
// probes here look up the oldest waiting and the oldest held row by index, one row
// each, and compare their IDs.
func (s *SQL) behindMySQL(grouped bool) string {
	index, cond := s.Table+"_pending", `b.outbox = m.outbox AND b.state = %d AND b.part = m.part`
	if grouped {
		index, cond = s.Table+"_blocking", `b.outbox = m.outbox AND b.part = m.part AND b.group_key = m.group_key AND b.state = %d`
	}
	oldest := func(state int) string {
		return `(SELECT b.id FROM ` + s.Messages + ` AS b FORCE INDEX (` + s.Quote(index) + `) WHERE ` +
			fmt.Sprintf(cond, state) + ` ORDER BY b.id LIMIT 1) < m.id`
	}
	return `COALESCE(` + oldest(Waiting) + ` OR ` + oldest(Held) + `, 0)`
}

// Hold makes ready rows of a partition held, those of ids (in ascending order) that are
// still behind an earlier waiting or held row (grouped: of their group; otherwise of
// their partition).
func (s *SQL) Hold(outbox string, part int, ids []int64, grouped bool) (string, []any) {
	cond, more := s.IDList(ids)
	// (MariaDB reads the table an UPDATE changes in its subqueries, from 10.3.2 on.)
	table := s.Messages + ` AS m`
	if s.Kind == MySQL {
		table += ` FORCE INDEX (PRIMARY)` // see updateByID
	}
	// The IDs' range as well: a plan that reads the rows through the index of ready rows
	// (PostgreSQL's, without statistics on a backlog just written) then reads the range
	// of the batch the IDs came from, not every ready row of the partition.
	args := append([]any{outbox, part, ids[0], ids[len(ids)-1]}, more...)
	behind := s.behind(grouped)
	if s.Kind == Postgres {
		// As a condition checked per row, by the index of waiting and held rows with the
		// row's group and ID: a bare EXISTS becomes a semi-join, which (the outer rows'
		// outbox and partition being constants) PostgreSQL may run by reading all the
		// partition's waiting and held rows for each row.
		behind = `(` + behind + `) IS TRUE`
	}
	return s.p(`UPDATE ` + table + ` SET state = ` + strconv.Itoa(Held) + ` WHERE m.outbox = ? AND m.state = 0 AND m.part = ?` +
		` AND m.id BETWEEN ? AND ? AND m.` + cond + ` AND ` + behind), args
}

// PendingGroups returns the query for the partition and group key of the given pending
// messages of an outbox. Whatever its state, a pending message may have later messages
// of its group held behind it: a waiting or held one, and also a ready one that was
// waiting (its retry or its time came) and is not delivered yet.
func (s *SQL) PendingGroups(outbox string, ids []int64) (string, []any) {
	cond, args := s.IDList(ids)
	return s.p(`SELECT DISTINCT part, group_key FROM ` + s.Messages + ` WHERE outbox = ? AND state IN ` + PendingStates +
		` AND ` + cond), append([]any{outbox}, args...)
}

// Release makes the held rows of a partition ready: those of the given groups, or all
// of them when groups is nil. A released row still behind a waiting one is held again by
// the next fetch that reads it.
func (s *SQL) Release(outbox string, part int, groups []string) (string, []any) {
	q := `UPDATE ` + s.Messages + ` SET state = 0 WHERE outbox = ? AND state = ` + strconv.Itoa(Held) + ` AND part = ?`
	args := []any{outbox, part}
	if groups != nil {
		cond, more := s.stringList("group_key", groups)
		q += ` AND ` + cond
		args = append(args, more...)
	}
	return s.p(q), args
}

// stringList returns a condition "col IN (…)" for vals, and its arguments.
func (s *SQL) stringList(col string, vals []string) (string, []any) {
	switch s.Kind {
	case Postgres:
		return col + ` = ANY(?::text[])`, []any{pgTextArray(vals)}
	case SQLite:
		b, _ := json.Marshal(vals) // strings always encode
		return col + ` IN (SELECT value FROM json_each(?))`, []any{string(b)}
	}
	args := make([]any, len(vals))
	for i, v := range vals {
		args[i] = v
	}
	return col + ` IN (?` + strings.Repeat(`, ?`, len(vals)-1) + `)`, args
}

// pgTextArray writes a PostgreSQL array literal of text values.
func pgTextArray(vals []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, v := range vals {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for _, r := range v {
			if r == '"' || r == '\\' {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// pgIntArray writes a PostgreSQL array literal of integers.
func pgIntArray(vals []int64) string { return "{" + joinInts(vals) + "}" }

// joinInts writes integers separated by commas.
func joinInts(vals []int64) string {
	var b strings.Builder
	for i, v := range vals {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(v, 10))
	}
	return b.String()
}

// IDList returns a condition "id IN (…)" for ids, and its arguments. However many IDs
// there are, it takes at most one placeholder: PostgreSQL gets an array, SQLite a JSON
// list, and MySQL the numbers written into the statement (a prepared statement there
// holds at most 65,535 placeholders; integers need no quoting).
func (s *SQL) IDList(ids []int64) (string, []any) {
	switch s.Kind {
	case Postgres:
		return `id = ANY(?::bigint[])`, []any{pgIntArray(ids)}
	case SQLite:
		return `id IN (SELECT value FROM json_each(?))`, []any{"[" + joinInts(ids) + "]"}
	}
	return `id IN (` + joinInts(ids) + `)`, nil
}

// deleteByID and updateByID begin a statement that changes messages picked by ID.
//
// On MySQL they make InnoDB reach the rows through the primary key: when the IDs are a
// good part of a small table (the usual backlog), its optimizer prefers a full scan, and
// a full-scan DELETE or UPDATE waits for the row lock of every row it passes, including
// the uncommitted row of any publishing transaction still open. A confirmation would then
// wait for unrelated publishers, or fail after the lock wait timeout.
func (s *SQL) deleteByID() string {
	if s.Kind == MySQL {
		return `DELETE m FROM ` + s.Messages + ` AS m FORCE INDEX (PRIMARY)`
	}
	return `DELETE FROM ` + s.Messages
}

func (s *SQL) updateByID() string {
	if s.Kind == MySQL {
		return `UPDATE ` + s.Messages + ` FORCE INDEX (PRIMARY)`
	}
	return `UPDATE ` + s.Messages
}

// DeleteIDs deletes messages of an outbox by ID, whatever their state.
func (s *SQL) DeleteIDs(outbox string, ids []int64) (string, []any) {
	cond, args := s.IDList(ids)
	return s.p(s.deleteByID() + ` WHERE outbox = ? AND ` + cond), append([]any{outbox}, args...)
}

// DeletePending deletes delivered messages still pending (retention delete).
func (s *SQL) DeletePending(ids []int64) (string, []any) {
	cond, args := s.IDList(ids)
	return s.p(s.deleteByID() + ` WHERE state = 0 AND ` + cond), args
}

// MarkDelivered marks pending messages delivered (retention keep).
func (s *SQL) MarkDelivered(ids []int64) (string, []any) {
	cond, args := s.IDList(ids)
	return s.p(s.updateByID() + ` SET state = 1, delivered_at = ` + s.Now() + ` WHERE state = 0 AND ` + cond), args
}

// ConfirmAll (PostgreSQL) extends the lease of (outbox, part) if its token still matches
// and, only then, deletes the given pending messages (or marks them delivered, with keep).
// Its first five arguments are the lease duration in microseconds, the outbox, the
// partition, the token and the owner; it returns whether the lease held (1 or 0) and how many rows
// it changed. The lease row stays locked until the statement ends, so a takeover either
// waits for it or makes it change nothing.
func (s *SQL) ConfirmAll(ids []int64, keep bool) (string, []any) {
	cond, args := s.IDList(ids)
	change := `DELETE FROM ` + s.Messages + ` WHERE state = 0 AND ` + cond
	if keep {
		change = `UPDATE ` + s.Messages + ` SET state = 1, delivered_at = now() WHERE state = 0 AND ` + cond
	}
	return s.p(`WITH l AS (UPDATE ` + s.Leases + ` SET expires_at = ` + s.NowPlus("?") +
		` WHERE outbox = ? AND part = ? AND token = ? AND owner = ? RETURNING 1), d AS (` + change +
		` AND EXISTS (SELECT 1 FROM l) RETURNING 1) SELECT (SELECT COUNT(*) FROM l), (SELECT COUNT(*) FROM d)`), args
}

// RetryDeadIDs revives dead messages of an outbox by ID.
func (s *SQL) RetryDeadIDs(outbox string, ids []int64) (string, []any) {
	cond, args := s.IDList(ids)
	return s.p(s.updateByID() + ` SET state = 0, attempts = 0, available_at = ` + s.Now() +
		` WHERE outbox = ? AND state = 2 AND ` + cond), append([]any{outbox}, args...)
}

// DeadPlacement returns the query for id, group_key and part of the dead messages of an
// outbox: those of ids, or all of them when ids is empty.
func (s *SQL) DeadPlacement(outbox string, ids []int64) (string, []any) {
	q := `SELECT id, group_key, part FROM ` + s.Messages + ` WHERE outbox = ? AND state = 2`
	if len(ids) == 0 {
		return s.p(q), []any{outbox}
	}
	cond, args := s.IDList(ids)
	return s.p(q + ` AND ` + cond), append([]any{outbox}, args...)
}

// MovePending moves pending messages of an outbox, by ID, into partition part.
func (s *SQL) MovePending(outbox string, part int, ids []int64) (string, []any) {
	cond, args := s.IDList(ids)
	return s.p(s.updateByID() + ` SET part = ? WHERE outbox = ? AND state IN ` + PendingStates + ` AND ` + cond),
		append([]any{part, outbox}, args...)
}

// RetryDeadInto revives dead messages of an outbox by ID into partition part.
func (s *SQL) RetryDeadInto(outbox string, part int, ids []int64) (string, []any) {
	cond, args := s.IDList(ids)
	return s.p(s.updateByID() + ` SET state = 0, attempts = 0, available_at = ` + s.Now() + `, part = ?` +
		` WHERE outbox = ? AND state = 2 AND ` + cond), append([]any{part, outbox}, args...)
}

// Up returns the statements that create the tables and indexes, idempotently.
func (s *SQL) Up() []string {
	idx := func(suffix string) string { return s.Quote(s.Table + "_" + suffix) }
	var stmts []string
	switch s.Kind {
	case Postgres:
		if s.Schema != "" {
			stmts = append(stmts, `CREATE SCHEMA IF NOT EXISTS `+s.Quote(s.Schema))
		}
		stmts = append(stmts,
			`CREATE TABLE IF NOT EXISTS `+s.Messages+` (
	id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
	outbox text NOT NULL,
	type text NOT NULL DEFAULT '',
	group_key text NOT NULL DEFAULT '',
	part integer NOT NULL DEFAULT 0,
	payload bytea NOT NULL,
	headers text,
	state smallint NOT NULL DEFAULT 0,
	attempts integer NOT NULL DEFAULT 0,
	last_error text,
	available_at timestamptz NOT NULL DEFAULT now(),
	created_at timestamptz NOT NULL DEFAULT now(),
	delivered_at timestamptz
)`,
			`CREATE INDEX IF NOT EXISTS `+idx("pending")+` ON `+s.Messages+` (outbox, part, id) WHERE state = 0`,
			`CREATE INDEX IF NOT EXISTS `+idx("dead")+` ON `+s.Messages+` (outbox, id) WHERE state = 2`,
			`CREATE INDEX IF NOT EXISTS `+idx("delivered")+` ON `+s.Messages+` (outbox, delivered_at) WHERE state = 1`,
			`CREATE INDEX IF NOT EXISTS `+idx("waiting")+` ON `+s.Messages+` (outbox, part, available_at) WHERE state = 3`,
			`CREATE INDEX IF NOT EXISTS `+idx("blocking")+` ON `+s.Messages+` (outbox, part, group_key, id) WHERE state IN `+blockingStates,
			`CREATE INDEX IF NOT EXISTS `+idx("ready_group")+` ON `+s.Messages+` (group_key, outbox, part, id) WHERE `+readyOfGroup,
			s.waitingFromReady(),
			`CREATE TABLE IF NOT EXISTS `+s.Leases+` (
	outbox text NOT NULL,
	part integer NOT NULL,
	owner text NOT NULL DEFAULT '',
	token bigint NOT NULL DEFAULT 0,
	expires_at timestamptz NOT NULL DEFAULT 'epoch',
	paused boolean NOT NULL DEFAULT false,
	PRIMARY KEY (outbox, part)
)`,
			`CREATE TABLE IF NOT EXISTS `+s.Nodes+` (
	outbox text NOT NULL,
	node text NOT NULL,
	max_parts integer NOT NULL DEFAULT 0,
	joined_at timestamptz NOT NULL,
	seen_at timestamptz NOT NULL,
	expires_at timestamptz NOT NULL,
	PRIMARY KEY (outbox, node)
)`)
	case SQLite:
		stmts = append(stmts,
			`CREATE TABLE IF NOT EXISTS `+s.Messages+` (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	outbox TEXT NOT NULL,
	type TEXT NOT NULL DEFAULT '',
	group_key TEXT NOT NULL DEFAULT '',
	part INTEGER NOT NULL DEFAULT 0,
	payload BLOB NOT NULL,
	headers TEXT,
	state INTEGER NOT NULL DEFAULT 0,
	attempts INTEGER NOT NULL DEFAULT 0,
	last_error TEXT,
	available_at INTEGER NOT NULL DEFAULT (`+sqliteNowDefault+`),
	created_at INTEGER NOT NULL DEFAULT (`+sqliteNowDefault+`),
	delivered_at INTEGER
)`,
			`CREATE INDEX IF NOT EXISTS `+idx("pending")+` ON `+s.Quote(s.Table)+` (outbox, part, id) WHERE state = 0`,
			`CREATE INDEX IF NOT EXISTS `+idx("dead")+` ON `+s.Quote(s.Table)+` (outbox, id) WHERE state = 2`,
			`CREATE INDEX IF NOT EXISTS `+idx("delivered")+` ON `+s.Quote(s.Table)+` (outbox, delivered_at) WHERE state = 1`,
			`CREATE INDEX IF NOT EXISTS `+idx("waiting")+` ON `+s.Quote(s.Table)+` (outbox, part, available_at) WHERE state = 3`,
			`CREATE INDEX IF NOT EXISTS `+idx("blocking")+` ON `+s.Quote(s.Table)+` (outbox, part, group_key, id) WHERE state IN `+blockingStates,
			`CREATE INDEX IF NOT EXISTS `+idx("ready_group")+` ON `+s.Quote(s.Table)+` (group_key, outbox, part, id) WHERE `+readyOfGroup,
			s.waitingFromReady(),
			`CREATE TABLE IF NOT EXISTS `+s.Leases+` (
	outbox TEXT NOT NULL,
	part INTEGER NOT NULL,
	owner TEXT NOT NULL DEFAULT '',
	token INTEGER NOT NULL DEFAULT 0,
	expires_at INTEGER NOT NULL DEFAULT 0,
	paused INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (outbox, part)
)`,
			`CREATE TABLE IF NOT EXISTS `+s.Nodes+` (
	outbox TEXT NOT NULL,
	node TEXT NOT NULL,
	max_parts INTEGER NOT NULL DEFAULT 0,
	joined_at INTEGER NOT NULL,
	seen_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	PRIMARY KEY (outbox, node)
)`)
	case MySQL:
		stmts = append(stmts,
			`CREATE TABLE IF NOT EXISTS `+s.Messages+` (
	id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
	outbox `+mysqlName(200)+`,
	type VARCHAR(255) NOT NULL DEFAULT '',
	group_key `+mysqlName(255)+` DEFAULT '',
	part INT NOT NULL DEFAULT 0,
	payload LONGBLOB NOT NULL,
	headers TEXT,
	state TINYINT NOT NULL DEFAULT 0,
	attempts INT NOT NULL DEFAULT 0,
	last_error TEXT,
	available_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
	created_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
	delivered_at DATETIME(6),
	KEY `+idx("pending")+` (outbox, state, part, id),
	KEY `+idx("delivered")+` (outbox, state, delivered_at),
	KEY `+idx("waiting")+` (outbox, state, part, available_at),
	KEY `+idx("blocking")+` (outbox, part, group_key, state, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin`,
			// Tables made by earlier versions: names compare without padding, and the
			// indexes of waiting and held rows. A table already so changes nothing.
			`ALTER TABLE `+s.Messages+` MODIFY outbox `+mysqlName(200)+`, MODIFY group_key `+mysqlName(255)+` DEFAULT '',`+
				` ADD KEY IF NOT EXISTS `+idx("waiting")+` (outbox, state, part, available_at),`+
				` ADD KEY IF NOT EXISTS `+idx("blocking")+` (outbox, part, group_key, state, id)`,
			s.waitingFromReady(),
			`CREATE TABLE IF NOT EXISTS `+s.Leases+` (
	outbox `+mysqlName(200)+`,
	part INT NOT NULL,
	owner VARCHAR(255) NOT NULL DEFAULT '',
	token BIGINT NOT NULL DEFAULT 0,
	expires_at DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00',
	paused TINYINT NOT NULL DEFAULT 0,
	PRIMARY KEY (outbox, part)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin`,
			`ALTER TABLE `+s.Leases+` MODIFY outbox `+mysqlName(200),
			`CREATE TABLE IF NOT EXISTS `+s.Nodes+` (
	outbox `+mysqlName(200)+`,
	node VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
	max_parts INT NOT NULL DEFAULT 0,
	joined_at DATETIME(6) NOT NULL,
	seen_at DATETIME(6) NOT NULL,
	expires_at DATETIME(6) NOT NULL,
	PRIMARY KEY (outbox, node)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin`,
			`CREATE TABLE IF NOT EXISTS `+s.Locks+` (
	lock_key BIGINT NOT NULL PRIMARY KEY
) ENGINE=InnoDB`)
	}
	return stmts
}

// mysqlName is the column type of a name (outbox, group key) on MySQL: compared byte
// for byte, trailing spaces included (utf8mb4_bin pads them: 'a' = 'a ' there).
func mysqlName(n int) string {
	return `VARCHAR(` + strconv.Itoa(n) + `) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL`
}

// waitingFromReady moves the rows of a table made by an earlier version that are not due
// yet (scheduled, or waiting for a retry) from ready to waiting.
func (s *SQL) waitingFromReady() string {
	// On PostgreSQL now() is the migration transaction's start, which can be before a
	// message published while the migration waited for its lock: compared with it, that
	// message would look not due yet and be taken from a relay that has it in flight.
	// The statement's own clock sees only rows of earlier versions as not due.
	now := s.Now()
	if s.Kind == Postgres {
		now = `clock_timestamp()`
	}
	return `UPDATE ` + s.Messages + ` SET state = ` + strconv.Itoa(Waiting) + ` WHERE state = 0 AND available_at > ` + now
}

// Down returns the statements that drop what Up created.
func (s *SQL) Down() []string {
	stmts := []string{`DROP TABLE IF EXISTS ` + s.Nodes, `DROP TABLE IF EXISTS ` + s.Leases, `DROP TABLE IF EXISTS ` + s.Messages}
	if s.Kind == MySQL {
		stmts = append(stmts, `DROP TABLE IF EXISTS `+s.Locks)
	}
	return stmts
}

// Script joins statements into one SQL text, for migration tools.
func Script(stmts []string) string {
	var b strings.Builder
	for _, st := range stmts {
		fmt.Fprintf(&b, "%s;\n\n", st)
	}
	return b.String()
}
