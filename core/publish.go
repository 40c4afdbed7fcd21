package core

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxer-go/outboxer/core/internal/dialect"
	"github.com/outboxer-go/outboxer/internal/dbtime"
	"github.com/outboxer-go/outboxer/internal/nilhandle"
)

// MaxGroupKeyLen bounds group keys (they are indexed).
const MaxGroupKeyLen = 255

// MaxTypeLen bounds message types (MariaDB's type column holds 255).
const MaxTypeLen = 255

// MaxHeadersBytes bounds a message's headers, encoded as JSON (MariaDB's headers column
// is a TEXT, 65,535 bytes).
const MaxHeadersBytes = 65535

// insertChunk bounds the rows of one INSERT, under every dialect's placeholder limit.
const insertChunk = 1000

// PublishOption changes how messages are published.
type PublishOption func(*publishOptions)

type publishOptions struct {
	outbox    string
	groupKey  *string
	headers   map[string]string
	delay     time.Duration
	available time.Time
	// ctxHeaders come from Hooks.OnPublishContext: they fill in names the message and
	// WithHeaders leave unset.
	ctxHeaders map[string]string
}

// WithOutbox publishes into the named outbox instead of the message's Outbox().
func WithOutbox(name string) PublishOption { return func(o *publishOptions) { o.outbox = name } }

// WithGroupKey sets the group key, overriding the message's GroupKey(); "" makes the
// message unordered.
func WithGroupKey(key string) PublishOption { return func(o *publishOptions) { o.groupKey = &key } }

// WithHeaders merges headers over the message's own Headers(). Names starting with
// "outboxer-" or "outboxer_" (any case) are reserved for what the sinks add (see
// ReservedHeader); Publish refuses them.
func WithHeaders(h map[string]string) PublishOption {
	return func(o *publishOptions) {
		if o.headers == nil {
			o.headers = map[string]string{}
		}
		maps.Copy(o.headers, h)
	}
}

// WithDelay schedules the message d after the database's clock at insert. With ordering,
// a scheduled message holds back the later messages of its group until it is delivered.
func WithDelay(d time.Duration) PublishOption { return func(o *publishOptions) { o.delay = d } }

// WithAvailableAt schedules the message for t (converted to a delay from now on this
// process's clock, then applied to the database's clock).
func WithAvailableAt(t time.Time) PublishOption { return func(o *publishOptions) { o.available = t } }

// row is one message ready to insert; env is the envelope Publish returns, completed by
// the insert.
type row struct {
	ob      *box
	env     *Envelope
	headers any // JSON text or nil
	delay   int64
	size    int  // bytes in a statement, an upper bound (MySQL only)
	notify  bool // the relays of its outbox listen for notifications
}

// Publish writes msg into its outbox through db and returns the stored envelope.
//
// Pass the transaction your business writes use: the message is stored if and only if it
// commits. On a handle that is not a transaction (*sql.DB) the message is stored at once,
// atomically on its own, unless Config.RequireTransaction is set.
func (o *Outboxer) Publish(ctx context.Context, db Executor, msg Message, opts ...PublishOption) (Envelope, error) {
	envs, err := o.PublishAll(ctx, db, []Message{msg}, opts...)
	if err != nil {
		return Envelope{}, err
	}
	return envs[0], nil
}

// PublishAll writes msgs through db in one multi-row INSERT per table (a statement per
// 1,000 messages) and returns their envelopes in the same order. The options apply to
// every message. Nothing is written if any message is invalid.
//
// On MariaDB and MySQL a statement must fit in the server's max_allowed_packet (read once
// per instance, on the first publish of more than about 1 MiB): larger batches take several statements, and a
// message that cannot fit in one, counting the bytes the driver may escape, is refused
// with ErrPayloadTooLarge before anything is sent (the server would close the connection).
//
// On a handle that is not a transaction, all the messages or none are stored: when they
// take more than one statement, PublishAll runs them in a transaction of its own, so the
// handle must be able to begin one (*sql.DB and *sql.Conn can; any other is refused with
// ErrInvalidExecutor before anything is written).
func (o *Outboxer) PublishAll(ctx context.Context, db Executor, msgs []Message, opts ...PublishOption) ([]Envelope, error) {
	if hook := o.cfg.Hooks.OnPublishContext; hook != nil && len(msgs) > 0 {
		return o.publishContext(ctx, hook, db, msgs, opts)
	}
	return o.publishAll(ctx, db, msgs, opts...)
}

func (o *Outboxer) publishAll(ctx context.Context, db Executor, msgs []Message, opts ...PublishOption) ([]Envelope, error) {
	if isNil(db) {
		return nil, fmt.Errorf("%w: nil", ErrInvalidExecutor)
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	var po publishOptions
	if len(opts) > 0 {
		// Options write through a pointer of their own, so that po stays on the stack
		// when there are none.
		p := new(publishOptions)
		for _, opt := range opts {
			opt(p)
		}
		po = *p
	}
	envs := make([]Envelope, len(msgs))
	rows := make([]row, len(msgs))
	for i, m := range msgs {
		r, err := o.prepare(m, &po, &envs[i])
		if err != nil {
			if len(msgs) > 1 {
				return nil, fmt.Errorf("message %d: %w", i, err)
			}
			return nil, err
		}
		rows[i] = r
	}
	tx := inTransaction(db)
	if o.cfg.RequireTransaction && !tx {
		return nil, fmt.Errorf("%w: %T is not a transaction (RequireTransaction is set)", ErrNotInTransaction, db)
	}
	// Every message goes into a partition among the count its outbox's relays run with.
	var last *box
	var pl *placement
	for i := range rows {
		r := &rows[i]
		if r.ob != last {
			var err error
			if pl, err = o.shapeFor(ctx, db, r.ob); err != nil {
				return nil, err
			}
			last = r.ob
		}
		r.env.Partition = o.place(pl, r.env.GroupKey)
		r.notify = pl.notify
	}
	room := 0 // bytes a statement may hold; 0: no limit
	if o.kind == dialect.MySQL {
		var err error
		if room, err = o.fitPackets(ctx, db, rows); err != nil {
			return nil, err
		}
	}
	locks := o.lockKeys(rows)
	if !tx && (len(locks) > 0 || chunk(rows, room) < len(rows)) {
		// A lock must be held until commit, and several statements must commit together:
		// run them in a transaction of our own.
		b, ok := db.(txBeginner)
		if !ok {
			if len(locks) > 0 {
				return nil, fmt.Errorf("%w: SerializeWrites needs a transaction or a handle that can begin one, got %T", ErrInvalidExecutor, db)
			}
			return nil, fmt.Errorf("%w: these %d messages take more than one statement, atomic only in a transaction; %T is none and cannot begin one",
				ErrInvalidExecutor, len(rows), db)
		}
		own, err := b.BeginTx(ctx, nil)
		if err != nil {
			return nil, fmt.Errorf("outboxer: publish: %w", err)
		}
		defer own.Rollback()
		if err := o.write(ctx, own, rows, locks, room); err != nil {
			return nil, err
		}
		if err := own.Commit(); err != nil {
			return nil, fmt.Errorf("outboxer: publish: commit: %w", err)
		}
	} else if err := o.write(ctx, db, rows, locks, room); err != nil {
		return nil, err
	}
	o.published(envs, tx)
	return envs, nil
}

// ReservedHeader reports whether name is reserved for what the sinks add to a message
// (HeaderKey "outboxer-key", the Kafka sink's "outboxer-id", the SQS sink's attributes,
// the Watermill and River sinks' "outboxer_id" metadata, …): a name starting with
// "outboxer-" or "outboxer_", in any case. Publish refuses such headers with
// ErrInvalidMessage, because a sink would overwrite or drop them.
func ReservedHeader(name string) bool {
	const p = len("outboxer-")
	return len(name) >= p && strings.EqualFold(name[:p-1], "outboxer") && (name[p-1] == '-' || name[p-1] == '_')
}

// prepare validates and encodes one message into env.
func (o *Outboxer) prepare(m Message, po *publishOptions, env *Envelope) (row, error) {
	if isNil(m) {
		return row{}, fmt.Errorf("%w: nil message", ErrInvalidMessage)
	}
	name := po.outbox
	if name == "" {
		name = m.Outbox()
	}
	if name == "" {
		return row{}, fmt.Errorf("%w: %T names no outbox", ErrInvalidMessage, m)
	}
	ob, err := o.outbox(name)
	if err != nil {
		return row{}, err
	}
	*env = Envelope{Outbox: name, Type: messageType(m), State: Pending}
	if po.groupKey != nil {
		env.GroupKey = *po.groupKey
	} else if g, ok := m.(GroupKeyer); ok {
		env.GroupKey = g.GroupKey()
	}
	if len(env.GroupKey) > MaxGroupKeyLen {
		return row{}, fmt.Errorf("%w: group key of %d bytes (at most %d)", ErrInvalidMessage, len(env.GroupKey), MaxGroupKeyLen)
	}
	// Text the columns cannot hold unchanged is refused here, before any statement: a
	// database refusing it would abort the caller's transaction (PostgreSQL), and JSON
	// would replace invalid bytes in headers without a word.
	if !storableText(env.GroupKey) {
		return row{}, fmt.Errorf("%w: group key %q is not UTF-8 text without NUL bytes", ErrInvalidMessage, env.GroupKey)
	}
	if len(env.Type) > MaxTypeLen || !storableText(env.Type) {
		return row{}, fmt.Errorf("%w: type %q: at most %d bytes of UTF-8 text without NUL bytes", ErrInvalidMessage, env.Type, MaxTypeLen)
	}
	if h, ok := m.(Headerer); ok {
		if own := h.Headers(); len(own) > 0 {
			env.Headers = maps.Clone(own)
		}
	}
	if len(po.headers) > 0 {
		if env.Headers == nil {
			env.Headers = map[string]string{}
		}
		maps.Copy(env.Headers, po.headers)
	}
	for k, v := range env.Headers {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return row{}, fmt.Errorf("%w: header %q: keys and values must be UTF-8 text", ErrInvalidMessage, k)
		}
	}
	for k, v := range po.ctxHeaders {
		if _, set := env.Headers[k]; !set {
			if env.Headers == nil {
				env.Headers = make(map[string]string, len(po.ctxHeaders))
			}
			env.Headers[k] = v
		}
	}
	for k := range env.Headers {
		if ReservedHeader(k) {
			return row{}, fmt.Errorf("%w: header %q: names starting with %q or %q are reserved for the sinks, which would overwrite or drop it", ErrInvalidMessage, k, "outboxer-", "outboxer_")
		}
	}
	if raw, ok := m.(Raw); ok {
		if raw.Type == "" {
			return row{}, fmt.Errorf("%w: Raw needs a Type", ErrInvalidMessage)
		}
		env.Payload = raw.Data
	} else if env.Payload, err = o.cfg.Codec.Marshal(m); err != nil {
		return row{}, fmt.Errorf("%w: encode %T: %w", ErrInvalidMessage, m, err)
	}
	if env.Payload == nil {
		env.Payload = []byte{}
	}
	if len(env.Payload) > o.cfg.MaxPayloadBytes {
		return row{}, fmt.Errorf("%w: %T encodes to %d bytes (MaxPayloadBytes is %d)", ErrPayloadTooLarge, m, len(env.Payload), o.cfg.MaxPayloadBytes)
	}
	r := row{ob: ob, env: env}
	if len(env.Headers) > 0 {
		h, err := json.Marshal(env.Headers)
		if err != nil {
			return row{}, fmt.Errorf("%w: headers: %w", ErrInvalidMessage, err)
		}
		if len(h) > MaxHeadersBytes {
			return row{}, fmt.Errorf("%w: headers encode to %d bytes of JSON (at most %d)", ErrInvalidMessage, len(h), MaxHeadersBytes)
		}
		r.headers = string(h)
	}
	delay := po.delay
	if !po.available.IsZero() {
		delay = time.Until(po.available)
	}
	r.delay = max(delay, 0).Microseconds()
	return r, nil
}

// PartitionFor is the partition of a group key among n: FNV-1a of the key, modulo n. It
// never changes between versions, so rows written by another process land where this one
// reads them.
func PartitionFor(key string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// lockKeys returns, sorted so concurrent publishers cannot deadlock, the keys to lock for
// SerializeWrites.
func (o *Outboxer) lockKeys(rows []row) []int64 {
	if o.kind == dialect.SQLite {
		return nil
	}
	var keys []int64
	for _, r := range rows {
		if r.ob.cfg.SerializeWrites && r.env.GroupKey != "" {
			h := fnv.New64a()
			h.Write([]byte(r.ob.sql.Messages + "\x00" + r.env.Outbox + "\x00" + r.env.GroupKey))
			k := int64(h.Sum64())
			if o.kind == dialect.MySQL {
				// A bounded lock table: unrelated groups rarely share a row, and sharing one
				// only serialises them.
				k = int64(h.Sum64() % (1 << 20))
			}
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// write takes the locks and inserts the rows, one statement per chunk of at most room
// bytes (0: no limit).
func (o *Outboxer) write(ctx context.Context, db Executor, rows []row, locks []int64, room int) error {
	if len(locks) > 0 {
		// Any table's lock statement serialises: PostgreSQL's advisory locks are database-wide,
		// and on MySQL one lock table is enough.
		lock := rows[0].ob.sql.SerializeLock()
		for _, k := range locks {
			if _, err := db.ExecContext(ctx, lock, k); err != nil {
				return fmt.Errorf("outboxer: publish: serialize writes: %w", err)
			}
		}
	}
	for len(rows) > 0 {
		n := chunk(rows, room)
		if err := o.insert(ctx, db, rows[:n]); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}

// chunk is the length of the first statement's rows: a run of rows of the same table, at
// most insertChunk long and, when room > 0, of at most room bytes (a row that fits alone
// was checked by fitPackets).
func chunk(rows []row, room int) int {
	n, size := 1, rows[0].size
	for n < len(rows) && n < insertChunk && rows[n].ob.sql == rows[0].ob.sql {
		if room > 0 && size+rows[n].size > room {
			break
		}
		size += rows[n].size
		n++
	}
	return n
}

func (o *Outboxer) insert(ctx context.Context, db Executor, rows []row) error {
	if o.kind == dialect.SQLite {
		return o.insertSQLite(ctx, db, rows)
	}
	s := rows[0].ob.sql
	notify := false
	delayed := false
	for _, r := range rows {
		delayed = delayed || r.delay > 0
		notify = notify || r.notify
	}
	q := s.Insert(len(rows), delayed, notify)
	args := make([]any, 0, len(rows)*7+2)
	for _, r := range rows {
		args = append(args, r.env.Outbox, r.env.Type, r.env.GroupKey, r.env.Partition, r.env.Payload, r.headers)
		if delayed {
			args = append(args, rowState(r.delay), r.delay)
		}
	}
	if notify {
		args = append(args, s.NotifyChannel, notifyPayload(rows))
	}
	type ret struct {
		id             int64
		created, avail dbtime.Time
	}
	got := make([]ret, 0, len(rows))
	var ignored sql.NullBool
	dest := make([]any, 0, 4)
	err := queryRows(ctx, db, q, args, func(scan func(...any) error) error {
		got = append(got, ret{})
		r := &got[len(got)-1]
		dest = append(dest[:0], &r.id, &r.created)
		if delayed {
			dest = append(dest, &r.avail)
		}
		if notify {
			dest = append(dest, &ignored)
		}
		return scan(dest...)
	})
	if err != nil {
		if errors.Is(err, ErrInvalidExecutor) {
			return err
		}
		if nm := notMigrated(s.Messages, err); nm != nil {
			return nm
		}
		return fmt.Errorf("outboxer: publish into %s: %w", s.Messages, err)
	}
	if len(got) != len(rows) {
		return fmt.Errorf("outboxer: publish into %s: %d rows returned for %d inserted", s.Messages, len(got), len(rows))
	}
	// IDs are drawn in row order within one statement; the order rows come back in is not
	// promised, so match them by sorting.
	slices.SortFunc(got, func(a, b ret) int { return cmp.Compare(a.id, b.id) })
	for i := range rows {
		rows[i].env.ID = got[i].id
		rows[i].env.CreatedAt = got[i].created.Time
		rows[i].env.AvailableAt = got[i].created.Time
		if delayed {
			rows[i].env.AvailableAt = got[i].avail.Time
		}
	}
	return nil
}

// rowState is the state a new row is stored in: waiting when it is scheduled, so that no
// fetch reads it before it is due.
func rowState(delay int64) int {
	if delay > 0 {
		return dialect.Waiting
	}
	return dialect.Ready
}

// insertSQLite inserts without RETURNING, which costs SQLite a third of the statement:
// the IDs are consecutive up to the last insert ID (one writer), and the times come from
// this process's clock, which is the embedded database's clock.
func (o *Outboxer) insertSQLite(ctx context.Context, db Executor, rows []row) error {
	s := rows[0].ob.sql
	// Milliseconds, the precision of SQLite's own clock that the worker compares with:
	// a message is never "not yet available" to a worker reading just after it.
	now := time.Now().Truncate(time.Millisecond).UTC()
	args := make([]any, 0, len(rows)*8)
	for _, r := range rows {
		args = append(args, r.env.Outbox, r.env.Type, r.env.GroupKey, r.env.Partition, r.env.Payload, r.headers,
			rowState(r.delay), now.UnixMicro(), now.UnixMicro()+r.delay)
	}
	res, err := db.ExecContext(ctx, s.InsertTimed(len(rows)), args...)
	if err != nil {
		if nm := notMigrated(s.Messages, err); nm != nil {
			return nm
		}
		return fmt.Errorf("outboxer: publish into %s: %w", s.Messages, err)
	}
	last, err := res.LastInsertId()
	if err != nil {
		return fmt.Errorf("outboxer: publish into %s: %w", s.Messages, err)
	}
	if n, err := res.RowsAffected(); err == nil && n != int64(len(rows)) {
		return fmt.Errorf("outboxer: publish into %s: %d rows inserted of %d", s.Messages, n, len(rows))
	}
	first := last - int64(len(rows)) + 1
	for i := range rows {
		rows[i].env.ID = first + int64(i)
		rows[i].env.CreatedAt = now
		rows[i].env.AvailableAt = now.Add(time.Duration(rows[i].delay) * time.Microsecond)
	}
	return nil
}

// notifyPayload names what a notification wakes: "outbox:p1,p2" for the partitions of
// one outbox, so that only their owners fetch; "" (everything) when rows span outboxes.
func notifyPayload(rows []row) string {
	name := rows[0].env.Outbox
	var parts []int
	for _, r := range rows {
		if r.env.Outbox != name {
			return ""
		}
		parts = append(parts, r.env.Partition)
	}
	slices.Sort(parts)
	parts = slices.Compact(parts)
	var b strings.Builder
	b.WriteString(name)
	b.WriteByte(':')
	for i, p := range parts {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(p))
	}
	return b.String()
}

// published raises the publish event and wakes this instance's workers.
func (o *Outboxer) published(envs []Envelope, tx bool) {
	if o.cfg.Hooks.OnPublish != nil {
		var names []string
		for _, e := range envs {
			if !slices.Contains(names, e.Outbox) {
				names = append(names, e.Outbox)
			}
		}
		o.cfg.Hooks.OnPublish(PublishEvent{Name: o.cfg.Name, Outboxes: names, Count: len(envs)})
	}
	if !o.running.Load() {
		return
	}
	kind := wakeNow
	if tx {
		kind = wakeSoon
	}
	for _, e := range envs {
		o.outboxes[e.Outbox].signal(e.Partition, kind)
	}
}

// isNil reports whether v is nil or a typed nil (see nilhandle.Is).
func isNil(v any) bool { return nilhandle.Is(v) }
