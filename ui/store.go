package outboxerui

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/internal/dbtime"
)

// The values of the state column (core.StoredPendingStates lists the pending ones).
const (
	stReady     = 0
	stDelivered = 1
	stDead      = 2
	stWaiting   = 3
	stHeld      = 4
)

// store reads one database's outbox table with the dashboard's own statements; changes
// go through the core's admin API (see admin).
type store struct {
	name          string
	db            *sql.DB
	dialect       core.Dialect
	table, schema string
	msgs, leases  string // quoted, qualified
}

func newStore(in Instance) *store {
	s := &store{name: in.Name, db: in.DB, dialect: in.Dialect, table: in.Table, schema: in.Schema}
	s.msgs = s.qualified(in.Table)
	s.leases = s.qualified(in.Table + "_leases")
	return s
}

func (s *store) quote(name string) string {
	if s.dialect == core.MySQL {
		return "`" + name + "`"
	}
	return `"` + name + `"`
}

func (s *store) qualified(name string) string {
	if s.schema != "" {
		return s.quote(s.schema) + "." + s.quote(name)
	}
	return s.quote(name)
}

// p rewrites ? placeholders into $n for PostgreSQL.
func (s *store) p(q string) string {
	if s.dialect != core.Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// now is the database clock in the type of the time columns.
func (s *store) now() string {
	switch s.dialect {
	case core.SQLite:
		return `CAST(unixepoch('subsec') * 1000000 AS INTEGER)`
	case core.MySQL:
		return `UTC_TIMESTAMP(6)`
	}
	return `now()`
}

// minus is the database clock minus a number of microseconds given as a placeholder.
func (s *store) minus() string {
	switch s.dialect {
	case core.SQLite:
		return `(` + s.now() + ` - ?)`
	case core.MySQL:
		return `(UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND)`
	}
	return `(now() - ?::bigint * interval '1 microsecond')`
}

// timeCol selects a time column so that dbtime.Time scans it.
func (s *store) timeCol(col string) string {
	if s.dialect == core.MySQL {
		return `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ` + col + `)`
	}
	return col
}

func (s *store) query(ctx context.Context, q string, args []any, row func(scan func(...any) error) error) error {
	rows, err := s.db.QueryContext(ctx, s.p(q), args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

// outboxes reads the outboxes of the table, with the partition count each has used: from
// the lease table, and from the messages through their partial indexes (one index probe
// per outbox and state, whatever the size of the table).
func (s *store) outboxes(ctx context.Context) (map[string]int, error) {
	found := map[string]int{}
	err := s.query(ctx, `SELECT outbox, MAX(part) FROM `+s.leases+` GROUP BY outbox`, nil, func(scan func(...any) error) error {
		var name string
		var part int
		if err := scan(&name, &part); err != nil {
			return err
		}
		found[name] = part + 1
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outboxerui: read the outboxes of %s: %w", s.msgs, err)
	}
	q := `SELECT DISTINCT outbox FROM ` + s.msgs
	if s.dialect != core.MySQL {
		var ctes, sels []string
		for i, pred := range []string{"state = 0", "state = 1", "state = 2", "state IN (3, 4)"} {
			t := "t" + strconv.Itoa(i)
			ctes = append(ctes, t+`(o) AS (SELECT MIN(outbox) FROM `+s.msgs+` WHERE `+pred+
				` UNION ALL SELECT (SELECT MIN(outbox) FROM `+s.msgs+` WHERE `+pred+` AND outbox > `+t+`.o) FROM `+t+` WHERE `+t+`.o IS NOT NULL)`)
			sels = append(sels, `SELECT o FROM `+t+` WHERE o IS NOT NULL`)
		}
		q = `WITH RECURSIVE ` + strings.Join(ctes, ", ") + ` ` + strings.Join(sels, " UNION ")
	}
	err = s.query(ctx, q, nil, func(scan func(...any) error) error {
		var name string
		if err := scan(&name); err != nil {
			return err
		}
		found[name] = max(found[name], 1)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outboxerui: read the outboxes of %s: %w", s.msgs, err)
	}
	return found, nil
}

// admin returns a publish-only core instance over the outboxes, for the core's admin
// operations (RetryDead, Discard, Pause, Resume).
func (s *store) admin(outboxes map[string]int) (*core.Outboxer, error) {
	cfg := core.Config{
		Name:        "outboxer-ui",
		DB:          s.db,
		Dialect:     s.dialect,
		Table:       s.table,
		Schema:      s.schema,
		PublishOnly: true,
		Outboxes:    map[string]core.OutboxConfig{},
	}
	for name, parts := range outboxes {
		cfg.Outboxes[name] = core.OutboxConfig{Partitions: max(parts, 1)}
	}
	return core.New(cfg)
}

// filter selects messages of an outbox. Every field is a parameter of the statement.
type filter struct {
	State     string // pending, retrying, scheduled, dead, delivered
	Type      string
	Group     string
	HeaderKey string
	HeaderVal string
	Error     string // a substring of the last error
	MinID     int64
	MaxID     int64
	Age       time.Duration // older than
	// retryable keeps only the messages a retry changes: dead, or waiting for a retry
	// (state 3 after a failure; a message scheduled for later that never failed keeps
	// its time).
	retryable bool
}

// retryableCond selects the messages a retry changes: dead ones, and those waiting for a
// retry after a failure. See retryable.
const retryableCond = "(state = 2 OR (state = 3 AND attempts > 0))"

// retryable says whether a retry changes a message: dead, or waiting for a retry after a
// failure. A message scheduled for later (state 3, no attempt yet) is not retried: that
// would deliver it before its time.
func retryable(state, attempts int) bool {
	return state == stDead || (state == stWaiting && attempts > 0)
}

// states are the lists a message can be in, as the messages page offers them.
var states = []string{"pending", "retrying", "scheduled", "dead", "delivered"}

// likeEscape escapes s for LIKE … ESCAPE '!'.
func likeEscape(s string) string {
	r := strings.NewReplacer("!", "!!", "%", "!%", "_", "!_")
	return r.Replace(s)
}

// contains returns the condition that the text column col contains sub, case included,
// and its argument. SQLite's LIKE ignores the case of ASCII letters: instr does not.
func (s *store) contains(col, sub string) (string, any) {
	if s.dialect == core.SQLite {
		return "instr(" + col + ", ?) > 0", sub
	}
	return col + " LIKE ? ESCAPE '!'", "%" + likeEscape(sub) + "%"
}

// where returns the condition and arguments of the messages of outbox that f selects.
func (s *store) where(outbox string, f filter) (string, []any) {
	conds := []string{"outbox = ?"}
	args := []any{outbox}
	switch f.State {
	case "retrying":
		// Failed at least once and waiting: for the retry (waiting), or behind an
		// earlier message of the group (held). The partial index of waiting and held
		// rows serves it. A failed message that is due again is ready and not listed
		// here: the relay takes it at its next poll.
		conds = append(conds, "state IN (3, 4)", "attempts > 0")
	case "scheduled":
		conds = append(conds, "state = 3", "attempts = 0", "available_at > "+s.now())
	case "dead":
		conds = append(conds, "state = 2")
	case "delivered":
		conds = append(conds, "state = 1")
	default:
		conds = append(conds, "state IN "+core.StoredPendingStates)
	}
	if f.retryable {
		conds = append(conds, retryableCond)
	}
	if f.Type != "" {
		conds = append(conds, "type = ?")
		args = append(args, f.Type)
	}
	if f.Group != "" {
		conds = append(conds, "group_key = ?")
		args = append(args, f.Group)
	}
	if f.HeaderKey != "" {
		// Headers are stored as a JSON object written by encoding/json: the key and the
		// value appear as json.Marshal writes them.
		k, _ := json.Marshal(f.HeaderKey)
		pat := string(k) + ":"
		if f.HeaderVal != "" {
			v, _ := json.Marshal(f.HeaderVal)
			pat += string(v)
		}
		cond, arg := s.contains("headers", pat)
		conds, args = append(conds, cond), append(args, arg)
	}
	if f.Error != "" {
		cond, arg := s.contains("last_error", f.Error)
		conds, args = append(conds, cond), append(args, arg)
	}
	if f.MinID > 0 {
		conds = append(conds, "id >= ?")
		args = append(args, f.MinID)
	}
	if f.MaxID > 0 {
		conds = append(conds, "id <= ?")
		args = append(args, f.MaxID)
	}
	if f.Age > 0 {
		conds = append(conds, "created_at <= "+s.minus())
		args = append(args, f.Age.Microseconds())
	}
	return strings.Join(conds, " AND "), args
}

// row is a message as the lists show it.
type row struct {
	ID          int64
	Type        string
	Group       string
	Partition   int
	Size        int64
	Preview     []byte
	State       int
	Attempts    int
	LastError   string
	CreatedAt   time.Time
	AvailableAt time.Time
}

const previewBytes = 80

func (s *store) rowCols() string {
	return `id, type, group_key, part, LENGTH(payload), SUBSTR(payload, 1, ` + strconv.Itoa(previewBytes) + `), state, attempts, ` +
		`COALESCE(SUBSTR(last_error, 1, 200), ''), ` + s.timeCol("created_at") + `, ` + s.timeCol("available_at")
}

func scanRow(scan func(...any) error) (row, error) {
	var r row
	var created, available dbtime.Time
	if err := scan(&r.ID, &r.Type, &r.Group, &r.Partition, &r.Size, &r.Preview, &r.State, &r.Attempts, &r.LastError, &created, &available); err != nil {
		return row{}, err
	}
	r.CreatedAt, r.AvailableAt = created.Time, available.Time
	return r, nil
}

// list returns up to limit messages that f selects, by ID: after the ID after (ascending),
// or before the ID before (the page before, still returned in ascending order).
func (s *store) list(ctx context.Context, outbox string, f filter, after, before int64, limit int) ([]row, error) {
	cond, args := s.where(outbox, f)
	order := "ASC"
	switch {
	case before > 0:
		cond += " AND id < ?"
		args = append(args, before)
		order = "DESC"
	case after > 0:
		cond += " AND id > ?"
		args = append(args, after)
	}
	args = append(args, limit)
	var out []row
	err := s.query(ctx, `SELECT `+s.rowCols()+` FROM `+s.msgs+` WHERE `+cond+` ORDER BY id `+order+` LIMIT ?`, args, func(scan func(...any) error) error {
		r, err := scanRow(scan)
		out = append(out, r)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("outboxerui: list messages of %q: %w", outbox, err)
	}
	if order == "DESC" {
		slices.Reverse(out)
	}
	return out, nil
}

// count returns how many messages f selects, and the highest ID among them.
func (s *store) count(ctx context.Context, outbox string, f filter) (n, maxID int64, err error) {
	cond, args := s.where(outbox, f)
	var m sql.NullInt64
	err = s.db.QueryRowContext(ctx, s.p(`SELECT COUNT(*), MAX(id) FROM `+s.msgs+` WHERE `+cond), args...).Scan(&n, &m)
	if err != nil {
		return 0, 0, fmt.Errorf("outboxerui: count messages of %q: %w", outbox, err)
	}
	return n, m.Int64, nil
}

// ids returns up to limit IDs after after that f selects, ascending.
func (s *store) ids(ctx context.Context, outbox string, f filter, after int64, limit int) ([]int64, error) {
	cond, args := s.where(outbox, f)
	args = append(args, after, limit)
	var out []int64
	err := s.query(ctx, `SELECT id FROM `+s.msgs+` WHERE `+cond+` AND id > ? ORDER BY id LIMIT ?`, args, func(scan func(...any) error) error {
		var id int64
		err := scan(&id)
		out = append(out, id)
		return err
	})
	return out, err
}

// idsIn returns those of ids that f selects, ascending.
func (s *store) idsIn(ctx context.Context, outbox string, f filter, ids []int64) ([]int64, error) {
	cond, args := s.where(outbox, f)
	for _, id := range ids {
		args = append(args, id)
	}
	var out []int64
	err := s.query(ctx, `SELECT id FROM `+s.msgs+` WHERE `+cond+` AND id IN (?`+strings.Repeat(", ?", len(ids)-1)+`) ORDER BY id`, args,
		func(scan func(...any) error) error {
			var id int64
			err := scan(&id)
			out = append(out, id)
			return err
		})
	return out, err
}

// message is one message in full.
type message struct {
	row
	Outbox      string
	Payload     []byte
	Headers     map[string]string
	HeadersRaw  string
	DeliveredAt time.Time
}

// message reads one message of outbox; found is false when there is none with that ID.
func (s *store) message(ctx context.Context, outbox string, id int64) (m message, found bool, err error) {
	var headers, lastError sql.NullString
	var created, available, delivered dbtime.Time
	err = s.db.QueryRowContext(ctx, s.p(`SELECT id, outbox, type, group_key, part, payload, headers, state, attempts, last_error, `+
		s.timeCol("created_at")+`, `+s.timeCol("available_at")+`, `+s.timeCol("delivered_at")+
		` FROM `+s.msgs+` WHERE outbox = ? AND id = ?`), outbox, id).
		Scan(&m.ID, &m.Outbox, &m.Type, &m.Group, &m.Partition, &m.Payload, &headers, &m.State, &m.Attempts, &lastError,
			&created, &available, &delivered)
	if err == sql.ErrNoRows {
		return message{}, false, nil
	}
	if err != nil {
		return message{}, false, fmt.Errorf("outboxerui: read message %d of %q: %w", id, outbox, err)
	}
	m.Size = int64(len(m.Payload))
	m.LastError = lastError.String
	m.HeadersRaw = headers.String
	if headers.String != "" {
		if json.Unmarshal([]byte(headers.String), &m.Headers) != nil {
			m.Headers = nil // shown raw
		}
	}
	m.CreatedAt, m.AvailableAt, m.DeliveredAt = created.Time, available.Time, delivered.Time
	return m, true, nil
}

// groupWaiting returns up to limit other messages of the message's group that wait: for
// a retry, for their scheduled time, or behind an earlier message of the group (held).
// These are what a blocked group holds back; ready messages of the group are not read
// (no index has the group of ready rows: a rare group would cost a scan).
func (s *store) groupWaiting(ctx context.Context, m message, limit int) ([]row, error) {
	if m.Group == "" {
		return nil, nil
	}
	var out []row
	err := s.query(ctx, `SELECT `+s.rowCols()+` FROM `+s.msgs+` WHERE outbox = ? AND part = ? AND group_key = ? AND state IN (3, 4)`+
		` AND id <> ? ORDER BY id LIMIT ?`, []any{m.Outbox, m.Partition, m.Group, m.ID, limit},
		func(scan func(...any) error) error {
			r, err := scanRow(scan)
			out = append(out, r)
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("outboxerui: read the group of message %d: %w", m.ID, err)
	}
	return out, nil
}

// blocked is a group held back by its oldest waiting message.
type blocked struct {
	Partition int
	Group     string
	Behind    int64 // messages of the group waiting behind the blocking one
	Blocking  row
}

// blockedGroups returns up to limit groups of the outbox that wait behind a message
// (waiting for a retry or scheduled), the longest blocked first, with that message. It
// reads at most sampleCap+1 waiting and held messages, by partition and group: when the
// outbox has more (outboxStats.AllWaitingRead is false), the groups are the longest
// blocked among those read, and the count behind the last group read may be short.
func (s *store) blockedGroups(ctx context.Context, outbox string, limit int) ([]blocked, error) {
	var out []blocked
	var ids []any
	order := "part, group_key, id"
	if s.dialect == core.MySQL {
		order = "part, group_key, state, id" // the order of its index of blocking rows
	}
	err := s.query(ctx, `SELECT part, group_key, MIN(id), COUNT(*) FROM `+
		`(SELECT part, group_key, id, state FROM `+s.msgs+` WHERE outbox = ? AND state IN (3, 4) ORDER BY `+order+` LIMIT `+strconv.Itoa(sampleCap+1)+`) t`+
		` GROUP BY part, group_key HAVING group_key <> '' OR SUM(CASE WHEN state = 4 THEN 1 ELSE 0 END) > 0 ORDER BY MIN(id) LIMIT ?`,
		[]any{outbox, limit}, func(scan func(...any) error) error {
			var b blocked
			var n int64
			if err := scan(&b.Partition, &b.Group, &b.Blocking.ID, &n); err != nil {
				return err
			}
			b.Behind = n - 1
			out = append(out, b)
			ids = append(ids, b.Blocking.ID)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("outboxerui: read the blocked groups of %q: %w", outbox, err)
	}
	if len(out) == 0 {
		return nil, nil
	}
	byID := map[int64]row{}
	err = s.query(ctx, `SELECT `+s.rowCols()+` FROM `+s.msgs+` WHERE id IN (?`+strings.Repeat(", ?", len(ids)-1)+`)`, ids,
		func(scan func(...any) error) error {
			r, err := scanRow(scan)
			byID[r.ID] = r
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("outboxerui: read the blocking messages of %q: %w", outbox, err)
	}
	for i := range out {
		out[i].Blocking = byID[out[i].Blocking.ID]
	}
	return out, nil
}

// retryNow makes the waiting messages among ids due at once: they are delivered at the
// next poll instead of after their backoff. Their attempts are kept.
func (s *store) retryNow(ctx context.Context, outbox string, ids []int64) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	args := []any{outbox}
	for _, id := range ids {
		args = append(args, id)
	}
	res, err := s.db.ExecContext(ctx, s.p(`UPDATE `+s.msgs+` SET available_at = `+s.now()+` WHERE outbox = ? AND state = 3 AND attempts > 0 AND id IN (?`+
		strings.Repeat(", ?", len(ids)-1)+`)`), args...)
	if err != nil {
		return 0, fmt.Errorf("outboxerui: retry now in %q: %w", outbox, err)
	}
	return res.RowsAffected()
}

// split sorts ids of outbox into the dead ones and the ones waiting for a retry (the
// others cannot be retried; see retryable).
func (s *store) split(ctx context.Context, outbox string, ids []int64) (dead, waiting []int64, err error) {
	if len(ids) == 0 {
		return nil, nil, nil
	}
	args := []any{outbox}
	for _, id := range ids {
		args = append(args, id)
	}
	err = s.query(ctx, `SELECT id, state FROM `+s.msgs+` WHERE outbox = ? AND `+retryableCond+` AND id IN (?`+strings.Repeat(", ?", len(ids)-1)+`) ORDER BY id`,
		args, func(scan func(...any) error) error {
			var id int64
			var st int
			if err := scan(&id, &st); err != nil {
				return err
			}
			if st == stDead {
				dead = append(dead, id)
			} else {
				waiting = append(waiting, id)
			}
			return nil
		})
	if err != nil {
		return nil, nil, fmt.Errorf("outboxerui: read messages of %q: %w", outbox, err)
	}
	return dead, waiting, nil
}

// present returns those of ids that are messages of outbox, ascending.
func (s *store) present(ctx context.Context, outbox string, ids []int64) ([]int64, error) {
	var out []int64
	for chunk := range slices.Chunk(ids, 500) {
		args := []any{outbox}
		for _, id := range chunk {
			args = append(args, id)
		}
		err := s.query(ctx, `SELECT id FROM `+s.msgs+` WHERE outbox = ? AND id IN (?`+strings.Repeat(", ?", len(chunk)-1)+`)`, args,
			func(scan func(...any) error) error {
				var id int64
				err := scan(&id)
				out = append(out, id)
				return err
			})
		if err != nil {
			return nil, fmt.Errorf("outboxerui: read messages of %q: %w", outbox, err)
		}
	}
	slices.Sort(out)
	return out, nil
}
