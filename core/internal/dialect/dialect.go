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

// SQL holds the statements of one message table (and its lease table) in one dialect.
// Statements are written with ? placeholders and rewritten for PostgreSQL once.
type SQL struct {
	Kind Kind
	// Messages and Leases are the quoted, qualified table names.
	Messages, Leases, Locks string
	// Table and Schema as given (unquoted), for index names and notification channels.
	Table, Schema string

	// Fixed statements.
	AcquireLease, ReadLease, RenewLease, ReleaseLease, EnsureLease, FenceLease string
	Pause, Resume, CountLeases, DropLeasesFrom, AnyPaused, ClaimLeases         string
	FailMessage, KillMessage                                                   string
	Counts, ListPending, ListDead, RetryDeadAll, Prune, PartitionsInUse        string
	LeaseStatus, MovePartitions, NotifyChannel                                 string

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
	s.ClaimLeases = s.p(`UPDATE ` + s.Leases + ` SET token = 0 WHERE outbox = ? AND part < ? AND token < 0`)
	s.AcquireLease = s.p(`UPDATE ` + s.Leases + ` SET owner = ?, token = token + 1, expires_at = ` + s.NowPlus("?") +
		` WHERE outbox = ? AND part = ? AND expires_at < ` + now)
	s.ReadLease = s.p(`SELECT token, paused FROM ` + s.Leases + ` WHERE outbox = ? AND part = ? AND owner = ?`)
	s.RenewLease = s.p(`UPDATE ` + s.Leases + ` SET expires_at = ` + s.NowPlus("?") + ` WHERE outbox = ? AND part = ? AND token = ?`)
	// FenceLease is RenewLease as the first statement of a confirming transaction: it
	// locks the lease row, so a takeover waits for the commit or the confirm sees it.
	s.FenceLease = s.RenewLease
	s.ReleaseLease = s.p(`UPDATE ` + s.Leases + ` SET owner = '', expires_at = ` + s.zeroTime() + ` WHERE outbox = ? AND part = ? AND owner = ?`)
	s.Pause = s.p(`UPDATE ` + s.Leases + ` SET paused = ` + s.bool(true) + ` WHERE outbox = ?`)
	s.Resume = s.p(`UPDATE ` + s.Leases + ` SET paused = ` + s.bool(false) + ` WHERE outbox = ?`)
	// The partitions the last run had: rows made by Pause on an outbox that never ran do
	// not count.
	s.CountLeases = s.p(`SELECT COUNT(*) FROM ` + s.Leases + ` WHERE outbox = ? AND token >= 0`)
	s.AnyPaused = s.p(`SELECT COUNT(*) FROM ` + s.Leases + ` WHERE outbox = ? AND paused = ` + s.bool(true))
	s.DropLeasesFrom = s.p(`DELETE FROM ` + s.Leases + ` WHERE outbox = ? AND part >= ?`)
	s.LeaseStatus = s.p(`SELECT part, owner, token, ` + s.TimeCol("expires_at") + `, paused, ` + s.TimeCol(now) + ` FROM ` + s.Leases +
		` WHERE outbox = ? ORDER BY part`)

	s.FailMessage = s.p(`UPDATE ` + s.Messages + ` SET attempts = attempts + 1, last_error = ?, available_at = ` + s.NowPlus("?") +
		` WHERE id = ? AND state = 0 AND attempts = ?`)
	s.KillMessage = s.p(`UPDATE ` + s.Messages + ` SET attempts = attempts + 1, last_error = ?, state = 2` +
		` WHERE id = ? AND state = 0 AND attempts = ?`)

	s.Counts = s.p(`SELECT state, COUNT(*) FROM ` + s.Messages + ` WHERE outbox = ? GROUP BY state`)
	s.ListPending = s.p(`SELECT ` + cols + ` FROM ` + s.Messages + ` WHERE outbox = ? AND state = 0 ORDER BY id LIMIT ?`)
	s.ListDead = s.p(`SELECT ` + cols + ` FROM ` + s.Messages + ` WHERE outbox = ? AND state = 2 ORDER BY id LIMIT ?`)
	s.RetryDeadAll = s.p(`UPDATE ` + s.Messages + ` SET state = 0, attempts = 0, available_at = ` + now + ` WHERE outbox = ? AND state = 2`)
	s.PartitionsInUse = s.p(`SELECT DISTINCT part FROM ` + s.Messages + ` WHERE outbox = ? AND state = 0 AND part >= ?`)
	s.MovePartitions = s.p(`UPDATE ` + s.Messages + ` SET part = MOD(part, ?) WHERE outbox = ? AND state = 0 AND part >= ?`)
	switch kind {
	case MySQL:
		s.Prune = s.p(`DELETE FROM ` + s.Messages + ` WHERE outbox = ? AND state = 1 AND delivered_at < ` + s.NowPlus("?") + ` LIMIT 5000`)
	default:
		s.Prune = s.p(`DELETE FROM ` + s.Messages + ` WHERE id IN (SELECT id FROM ` + s.Messages +
			` WHERE outbox = ? AND state = 1 AND delivered_at < ` + s.NowPlus("?") + ` LIMIT 5000)`)
	}
	return s
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
// headers), and with delayed also a delay in microseconds; without it, the column
// defaults give created_at and available_at the same value (the database clock at the
// start of the transaction on PostgreSQL, of the statement on MariaDB), so the
// statement neither sends nor reads back the second.
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
		b.WriteString(` (outbox, type, group_key, part, payload, headers, created_at, available_at) VALUES `)
		row = `(?, ?, ?, ?, ?, ?, ` + s.Now() + `, ` + s.NowPlus("?") + `)`
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

// InsertTimed (SQLite) returns an INSERT of n rows, each taking (outbox, type, group_key,
// part, payload, headers, created_at, available_at) with the times in microseconds, that
// returns nothing: SQLite has one writer, so the rows of one statement get consecutive
// IDs ending at the last insert ID, and its clock is this process's clock.
func (s *SQL) InsertTimed(n int) string {
	return s.cached(insertKey{n: n, timed: true}, func() string { return s.insertTimed(n) })
}

func (s *SQL) insertTimed(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO ` + s.Messages + ` (outbox, type, group_key, part, payload, headers, created_at, available_at) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(`(?, ?, ?, ?, ?, ?, ?, ?)`)
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

// Exclusion is a group that must not be fetched from ID From on: its message From waits
// for a retry or is scheduled later. In Total mode the group is ignored.
type Exclusion struct {
	Group string
	From  int64
}

// Fetch returns the query for the next pending messages of a partition in ID order, and
// its arguments. The columns are id, type, group_key, payload, headers, attempts,
// last_error, created_at, available_at (what the caller does not know already), then
// whether the row is available now, then the database clock. Unordered messages that are not available yet are left out by
// the query; an ordered one is returned (not available), so that the caller learns its
// group is blocked and excludes it from then on.
//
// skip lists IDs never to return (Drain leaves what failed during the call alone).
func (s *SQL) Fetch(outbox string, part, limit int, mode Mode, excl []Exclusion, skip []int64) (string, []any) {
	var b strings.Builder
	now := s.Now()
	args := []any{outbox, part}
	// The table is aliased m: the subqueries below read columns named like its own
	// (json_each has an id column).
	b.WriteString(`SELECT id, type, group_key, payload, headers, attempts, last_error, ` + s.TimeCol("created_at") + `, ` +
		s.TimeCol("available_at") + `, available_at <= ` + now + `, ` + s.TimeCol(now) +
		` FROM ` + s.Messages + ` AS m WHERE outbox = ? AND part = ? AND state = 0`)
	switch mode {
	case Unordered:
		b.WriteString(` AND available_at <= ` + now)
	case Total:
		if len(excl) > 0 {
			lowest := excl[0].From
			for _, e := range excl {
				lowest = min(lowest, e.From)
			}
			b.WriteString(` AND id < ?`)
			args = append(args, lowest)
		}
	case Grouped:
		b.WriteString(` AND (group_key <> '' OR available_at <= ` + now + `)`)
		if len(excl) > 0 {
			cond, more := s.excluded(excl)
			b.WriteString(` AND NOT EXISTS (` + cond + `)`)
			args = append(args, more...)
		}
	}
	if len(skip) > 0 {
		cond, more := s.IDList(skip)
		b.WriteString(` AND NOT (` + cond + `)`)
		args = append(args, more...)
	}
	b.WriteString(` ORDER BY id LIMIT ?`)
	args = append(args, limit)
	return s.p(b.String()), args
}

// excluded is a subquery matching rows of the excluded groups from their blocking IDs on.
// The exclusions travel as one or two parameters (arrays or JSON), however many there are.
func (s *SQL) excluded(excl []Exclusion) (string, []any) {
	switch s.Kind {
	case Postgres:
		groups := make([]string, len(excl))
		froms := make([]int64, len(excl))
		for i, e := range excl {
			groups[i], froms[i] = e.Group, e.From
		}
		return `SELECT 1 FROM unnest(?::text[], ?::bigint[]) AS x(g, f) WHERE x.g = m.group_key AND m.id >= x.f`,
			[]any{pgTextArray(groups), pgIntArray(froms)}
	case SQLite:
		return `SELECT 1 FROM json_each(?) AS x WHERE x.value ->> 0 = m.group_key AND m.id >= x.value ->> 1`,
			[]any{jsonPairs(excl)}
	}
	return `SELECT 1 FROM JSON_TABLE(?, '$[*]' COLUMNS (g VARCHAR(255) PATH '$[0]', f BIGINT PATH '$[1]')) AS x` +
		` WHERE x.g COLLATE utf8mb4_bin = m.group_key AND m.id >= x.f`, []any{jsonPairs(excl)}
}

func jsonPairs(excl []Exclusion) string {
	pairs := make([][2]any, len(excl))
	for i, e := range excl {
		pairs[i] = [2]any{e.Group, e.From}
	}
	b, _ := json.Marshal(pairs) // strings and integers always encode
	return string(b)
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
// Its first four arguments are the lease duration in microseconds, the outbox, the
// partition and the token; it returns whether the lease held (1 or 0) and how many rows
// it changed. The lease row stays locked until the statement ends, so a takeover either
// waits for it or makes it change nothing.
func (s *SQL) ConfirmAll(ids []int64, keep bool) (string, []any) {
	cond, args := s.IDList(ids)
	change := `DELETE FROM ` + s.Messages + ` WHERE state = 0 AND ` + cond
	if keep {
		change = `UPDATE ` + s.Messages + ` SET state = 1, delivered_at = now() WHERE state = 0 AND ` + cond
	}
	return s.p(`WITH l AS (UPDATE ` + s.Leases + ` SET expires_at = ` + s.NowPlus("?") +
		` WHERE outbox = ? AND part = ? AND token = ? RETURNING 1), d AS (` + change +
		` AND EXISTS (SELECT 1 FROM l) RETURNING 1) SELECT (SELECT COUNT(*) FROM l), (SELECT COUNT(*) FROM d)`), args
}

// RetryDeadIDs revives dead messages of an outbox by ID.
func (s *SQL) RetryDeadIDs(outbox string, ids []int64) (string, []any) {
	cond, args := s.IDList(ids)
	return s.p(s.updateByID() + ` SET state = 0, attempts = 0, available_at = ` + s.Now() +
		` WHERE outbox = ? AND state = 2 AND ` + cond), append([]any{outbox}, args...)
}

// StillBlocking returns, of the given IDs, those still pending and not yet available.
func (s *SQL) StillBlocking(ids []int64) (string, []any) {
	cond, args := s.IDList(ids)
	return s.p(`SELECT id FROM ` + s.Messages + ` WHERE state = 0 AND available_at > ` + s.Now() + ` AND ` + cond), args
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
			`CREATE TABLE IF NOT EXISTS `+s.Leases+` (
	outbox text NOT NULL,
	part integer NOT NULL,
	owner text NOT NULL DEFAULT '',
	token bigint NOT NULL DEFAULT 0,
	expires_at timestamptz NOT NULL DEFAULT 'epoch',
	paused boolean NOT NULL DEFAULT false,
	PRIMARY KEY (outbox, part)
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
	available_at INTEGER NOT NULL DEFAULT (`+s.Now()+`),
	created_at INTEGER NOT NULL DEFAULT (`+s.Now()+`),
	delivered_at INTEGER
)`,
			`CREATE INDEX IF NOT EXISTS `+idx("pending")+` ON `+s.Quote(s.Table)+` (outbox, part, id) WHERE state = 0`,
			`CREATE INDEX IF NOT EXISTS `+idx("dead")+` ON `+s.Quote(s.Table)+` (outbox, id) WHERE state = 2`,
			`CREATE INDEX IF NOT EXISTS `+idx("delivered")+` ON `+s.Quote(s.Table)+` (outbox, delivered_at) WHERE state = 1`,
			`CREATE TABLE IF NOT EXISTS `+s.Leases+` (
	outbox TEXT NOT NULL,
	part INTEGER NOT NULL,
	owner TEXT NOT NULL DEFAULT '',
	token INTEGER NOT NULL DEFAULT 0,
	expires_at INTEGER NOT NULL DEFAULT 0,
	paused INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (outbox, part)
)`)
	case MySQL:
		stmts = append(stmts,
			`CREATE TABLE IF NOT EXISTS `+s.Messages+` (
	id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
	outbox VARCHAR(200) NOT NULL,
	type VARCHAR(255) NOT NULL DEFAULT '',
	group_key VARCHAR(255) NOT NULL DEFAULT '',
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
	KEY `+idx("delivered")+` (outbox, state, delivered_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
			`CREATE TABLE IF NOT EXISTS `+s.Leases+` (
	outbox VARCHAR(200) NOT NULL,
	part INT NOT NULL,
	owner VARCHAR(255) NOT NULL DEFAULT '',
	token BIGINT NOT NULL DEFAULT 0,
	expires_at DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00',
	paused TINYINT NOT NULL DEFAULT 0,
	PRIMARY KEY (outbox, part)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
			`CREATE TABLE IF NOT EXISTS `+s.Locks+` (
	lock_key BIGINT NOT NULL PRIMARY KEY
) ENGINE=InnoDB`)
	}
	return stmts
}

// Down returns the statements that drop what Up created.
func (s *SQL) Down() []string {
	stmts := []string{`DROP TABLE IF EXISTS ` + s.Leases, `DROP TABLE IF EXISTS ` + s.Messages}
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
