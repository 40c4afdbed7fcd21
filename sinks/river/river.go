package riversink

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/internal/cloudevents"
	"github.com/outboxer-go/outboxer/internal/sqlerr"
)

// DefaultKind is the kind of the jobs built from Job, unless Options.Kind says otherwise.
const DefaultKind = "outboxer_message"

// Keys the sink adds to every job's metadata (River's Metadata, a JSON object), next to
// whatever the insert options carry.
const (
	MetadataID     = "outboxer_id"     // the outbox row's ID, a JSON number
	MetadataOutbox = "outboxer_outbox" // the outbox name
	// MetadataHeaders holds the envelope's headers, a JSON object of strings, when it
	// has any: the trace context (traceparent, tracestate) among them reaches the worker
	// whatever Options.Job builds as args.
	MetadataHeaders = "outboxer_headers"
	// MetadataKey is the message key, a JSON string: core.MessageKey of Options.Source,
	// Options.Table and the ID, the same on every insert of a row's job and different
	// for any other row. It is the key a worker deduplicates on (the inbox package does;
	// see Worker): River runs a job at least once (a worker that crashes or times out
	// after its effect runs it again).
	MetadataKey = core.HeaderKey
	// MetadataGroupKey is the message's group key; absent for unordered messages.
	MetadataGroupKey = "outboxer_group_key"
)

// UniqueArgKey is the key the sink adds to a job's encoded args when it inserts outside
// the outbox's transaction (Deliver): "<table>/<id>", the only args River's unique check
// looks at. Workers decoding into their own struct ignore it; do not use it as a field
// name in your own args.
const UniqueArgKey = "outboxer_unique"

// Job is the job args the sink inserts when Options.Job is not set: the envelope itself.
// Its payload must be JSON (the default codec's output); for other payloads, set
// Options.Job. To give the jobs of an outbox a kind of their own, set Options.Kind and
// register a worker for a type that embeds Job:
//
//	type OrderEvent struct{ riversink.Job }
//	func (OrderEvent) Kind() string { return "order_event" }
type Job struct {
	ID       int64             `json:"id"`
	Outbox   string            `json:"outbox"`
	Type     string            `json:"type"`
	GroupKey string            `json:"group_key,omitempty"`
	Headers  map[string]string `json:"headers,omitempty"`
	Payload  json.RawMessage   `json:"payload"`
}

// Kind returns DefaultKind.
func (Job) Kind() string { return DefaultKind }

// ErrPayloadNotJSON is the (permanent) failure of a message that Job cannot carry.
var ErrPayloadNotJSON = errors.New("riversink: payload is not JSON; set Options.Job to build the job args")

// ErrEarlierFailed is the failure reported for a message that was not inserted because
// an earlier message of its group (of the batch, with OrderTotal) failed. The engine
// holds it back without counting an attempt.
var ErrEarlierFailed = errors.New("riversink: not inserted: an earlier message of its group failed")

// ErrNotJSONB is the (permanent) failure of a message whose job args or metadata
// PostgreSQL's jsonb refuses: a \u0000 escape, an unpaired UTF-16 surrogate escape
// (\ud800 alone), or invalid UTF-8. The sink checks every job before the insert, so
// such a message fails alone instead of failing the InsertMany of its whole batch.
var ErrNotJSONB = errors.New("riversink: PostgreSQL's jsonb cannot store the job")

// JobFromEnvelope returns the Job for env, or ErrPayloadNotJSON (permanent).
func JobFromEnvelope(env core.Envelope) (Job, error) {
	if !json.Valid(env.Payload) {
		return Job{}, core.Permanent(fmt.Errorf("message %d: %w", env.ID, ErrPayloadNotJSON))
	}
	return Job{ID: env.ID, Outbox: env.Outbox, Type: env.Type, GroupKey: env.GroupKey, Headers: env.Headers, Payload: env.Payload}, nil
}

// Options configure a sink. Every field is optional.
type Options struct {
	// Kind, when set, is the kind of every job the sink inserts, whatever the args'
	// Kind method says. Workers must be registered for it.
	Kind string
	// InsertOpts apply to every job of the outbox: queue, priority, max attempts, tags,
	// scheduling. Options returned by Job for one message win field by field.
	InsertOpts river.InsertOpts
	// Job builds the args (and optionally insert options) of the job for one message.
	// Default: JobFromEnvelope. An error fails that message; wrap it with
	// core.Permanent when retrying cannot help.
	Job func(env core.Envelope) (river.JobArgs, *river.InsertOpts, error)
	// Table is the outbox table the messages come from; it goes into the unique key of
	// jobs inserted by Deliver and into MetadataKey. Default core.DefaultTable.
	Table string
	// Source is a name of the outbox's database; it goes into MetadataKey. Set it when
	// several databases' outboxes reach the same workers, so that no two rows share a key.
	Source string
	// Ordering must be the outbox's Ordering: it says which messages a failed one holds
	// back (its group, everything, or nothing). Default core.OrderGroup.
	Ordering core.Ordering
	// CloudEvents, when set, adds the message's CloudEvent to each job's metadata
	// (MetadataCloudEvent). See CloudEvents.
	CloudEvents *CloudEvents
}

type sink struct {
	kind     string
	opts     river.InsertOpts
	job      func(core.Envelope) (river.JobArgs, *river.InsertOpts, error)
	table    string
	source   string
	ordering core.Ordering
	ce       *cloudevents.Options // nil: no MetadataCloudEvent
}

func newSink(opts Options) (sink, error) {
	if opts.Ordering < core.OrderGroup || opts.Ordering > core.OrderNone {
		return sink{}, fmt.Errorf("riversink: Options.Ordering is %v; want core.OrderGroup, OrderTotal or OrderNone", opts.Ordering)
	}
	if p := opts.InsertOpts.Priority; p < 0 || p > 4 {
		return sink{}, fmt.Errorf("riversink: Options.InsertOpts.Priority is %d; River takes 1 (highest) to 4, or 0 for the default", p)
	}
	if opts.InsertOpts.MaxAttempts < 0 {
		return sink{}, fmt.Errorf("riversink: Options.InsertOpts.MaxAttempts is %d; it must be 0 (River's default) or more", opts.InsertOpts.MaxAttempts)
	}
	if len(opts.InsertOpts.Metadata) > 0 {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(opts.InsertOpts.Metadata, &m); err != nil {
			return sink{}, fmt.Errorf("riversink: Options.InsertOpts.Metadata must be a JSON object: %w", err)
		}
	}
	ce, err := opts.CloudEvents.options()
	if err != nil {
		return sink{}, fmt.Errorf("riversink: invalid Options.%w", err)
	}
	s := sink{kind: opts.Kind, opts: opts.InsertOpts, job: opts.Job, table: opts.Table, source: opts.Source, ordering: opts.Ordering, ce: ce}
	if s.job == nil {
		s.job = func(env core.Envelope) (river.JobArgs, *river.InsertOpts, error) {
			j, err := JobFromEnvelope(env)
			return j, nil, err
		}
	}
	if s.table == "" {
		s.table = core.DefaultTable
	}
	return s, nil
}

// Sink inserts a River job per message with River's client, outside the outbox's
// transaction: at-least-once, with River's unique jobs keyed on the outbox row so that a
// re-delivered batch adds no job (see the package documentation).
type Sink struct {
	sink
	insertMany func(ctx context.Context, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error)
}

var _ core.Relay = (*Sink)(nil)

// New returns a Sink inserting through client, which must have a database pool (River
// in any database, with any driver).
func New[TTx any](client *river.Client[TTx], opts Options) (*Sink, error) {
	if client == nil {
		return nil, errors.New("riversink: client is nil")
	}
	s, err := newSink(opts)
	if err != nil {
		return nil, err
	}
	return &Sink{sink: s, insertMany: client.InsertMany}, nil
}

// Deliver inserts the batch's jobs with one InsertMany; when PostgreSQL refuses one of
// them, one at a time. See the package documentation.
func (s *Sink) Deliver(ctx context.Context, batch []core.Envelope) error {
	return s.deliver(ctx, batch, true, s.insertMany)
}

// TxSink inserts a River job per message in the outbox's own transaction: the engine
// calls DeliverTx with the transaction in which it removes the delivered rows, so the
// jobs exist if and only if the rows are gone. River must use the outbox's database.
type TxSink struct {
	sink
	client *river.Client[*sql.Tx]
}

var _ core.TxRelay = (*TxSink)(nil)

// NewTx returns a TxSink inserting through client, a River client on the database/sql
// driver (riverdatabasesql) for the outbox's database. It needs no pool of its own
// (riverdatabasesql.New(nil) is enough) unless Deliver is called directly.
func NewTx(client *river.Client[*sql.Tx], opts Options) (*TxSink, error) {
	if client == nil {
		return nil, errors.New("riversink: client is nil")
	}
	s, err := newSink(opts)
	if err != nil {
		return nil, err
	}
	return &TxSink{sink: s, client: client}, nil
}

// DeliverTx inserts the batch's jobs in tx with one InsertManyTx. A failed insert is
// rolled back to a savepoint, so tx stays usable: for the sink to insert the jobs one at
// a time (each in a savepoint of its own, see the package documentation) and for the
// engine to record the failures.
func (s *TxSink) DeliverTx(ctx context.Context, tx *sql.Tx, batch []core.Envelope) error {
	return s.deliver(ctx, batch, false, func(ctx context.Context, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error) {
		if _, err := tx.ExecContext(ctx, "SAVEPOINT outboxer_river"); err != nil {
			return nil, err
		}
		res, err := s.client.InsertManyTx(ctx, tx, params)
		if err != nil {
			if _, rbErr := tx.ExecContext(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT outboxer_river"); rbErr != nil {
				return nil, errors.Join(err, rbErr)
			}
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT outboxer_river"); err != nil {
			return nil, err
		}
		return res, nil
	})
}

// Deliver inserts outside any outbox transaction, like Sink.Deliver (unique jobs keyed
// on the row). The engine does not call it: it calls DeliverTx. It needs a client with
// a pool.
func (s *TxSink) Deliver(ctx context.Context, batch []core.Envelope) error {
	return s.deliver(ctx, batch, true, s.client.InsertMany)
}

func (s *sink) group(env *core.Envelope) string {
	switch s.ordering {
	case core.OrderTotal:
		return "\x00total"
	case core.OrderNone:
		return ""
	}
	return env.GroupKey
}

func (s *sink) deliver(ctx context.Context, batch []core.Envelope, unique bool,
	insert func(context.Context, []river.InsertManyParams) ([]*rivertype.JobInsertResult, error)) error {
	failed := map[int64]error{}
	blocked := map[string]bool{}
	params := make([]river.InsertManyParams, 0, len(batch))
	envs := make([]*core.Envelope, 0, len(batch))
	for i := range batch {
		env := &batch[i]
		g := s.group(env)
		if g != "" && blocked[g] {
			failed[env.ID] = ErrEarlierFailed
			continue
		}
		p, err := s.params(*env, unique)
		if err != nil {
			failed[env.ID] = err
			if g != "" && !errors.Is(err, core.ErrPermanent) {
				blocked[g] = true
			}
			continue
		}
		params = append(params, p)
		envs = append(envs, env)
	}
	if len(params) > 0 {
		if _, err := insert(ctx, params); err != nil {
			switch {
			case len(params) == 1:
				failed[envs[0].ID] = insertError(envs[0].ID, err)
			case refusedData(err):
				// One of the jobs is refused; which one, only inserting them alone tells.
				s.insertEach(ctx, envs, params, failed, blocked, insert)
			default:
				// A failure of the insert as a whole (the connection, a timeout): nothing
				// was inserted, and the engine retries the batch.
				err = fmt.Errorf("riversink: insert %d job(s): %w", len(params), err)
				if len(failed) == 0 {
					return err
				}
				for _, env := range envs {
					failed[env.ID] = err
				}
			}
		}
	}
	if len(failed) > 0 {
		return &core.PartialFailure{Failed: failed}
	}
	return nil
}

// insertEach is the fallback after PostgreSQL refused the data of an InsertMany of
// several jobs, which inserted none of them: it inserts the jobs again one at a time, in
// order, so that the job the database refuses fails alone. A later job of its group is
// not tried (ErrEarlierFailed) unless the refusal was permanent. Once ctx is done, the
// jobs not yet inserted fail with the error, as a failed InsertMany fails them all.
func (s *sink) insertEach(ctx context.Context, envs []*core.Envelope, params []river.InsertManyParams,
	failed map[int64]error, blocked map[string]bool,
	insert func(context.Context, []river.InsertManyParams) ([]*rivertype.JobInsertResult, error)) {
	for i, env := range envs {
		g := s.group(env)
		if g != "" && blocked[g] {
			failed[env.ID] = ErrEarlierFailed
			continue
		}
		_, err := insert(ctx, params[i:i+1])
		if err == nil {
			continue
		}
		err = insertError(env.ID, err)
		if ctx.Err() != nil {
			for _, rest := range envs[i:] {
				failed[rest.ID] = err
			}
			return
		}
		failed[env.ID] = err
		if g != "" && !errors.Is(err, core.ErrPermanent) {
			blocked[g] = true
		}
	}
}

// insertError is the failure of a message whose job, inserted alone, failed: permanent
// when PostgreSQL refused the job's data (see refusedData).
func insertError(id int64, err error) error {
	err = fmt.Errorf("riversink: insert job for message %d: %w", id, err)
	if refusedData(err) {
		return core.Permanent(err)
	}
	return err
}

// refusedData reports whether err is PostgreSQL refusing the data of a statement for
// good: a data exception (SQLSTATE class 22: a jsonb it cannot parse or store, a number
// out of range, a NUL byte in text), a violated check or not-null constraint, or a value
// beyond a size limit. The SQLSTATE is read from the driver's error (pgx, lib/pq,
// bun's pgdriver); any other error is not taken as a refusal.
func refusedData(err error) bool {
	code := sqlerr.SQLState(err)
	return strings.HasPrefix(code, "22") || code == "23502" || code == "23514" || code == "54000"
}

// params builds the insert of one message's job.
func (s *sink) params(env core.Envelope, unique bool) (river.InsertManyParams, error) {
	args, perMsg, err := s.job(env)
	if err != nil {
		return river.InsertManyParams{}, fmt.Errorf("riversink: job for message %d: %w", env.ID, err)
	}
	if args == nil {
		return river.InsertManyParams{}, core.Permanent(fmt.Errorf("riversink: job for message %d: Options.Job returned nil args", env.ID))
	}
	opts := mergeOpts(s.opts, perMsg)
	// River refuses these for the whole InsertMany; refuse them for this message alone.
	if opts.Priority < 0 || opts.Priority > 4 {
		return river.InsertManyParams{}, core.Permanent(fmt.Errorf("riversink: job for message %d: priority %d; River takes 1 (highest) to 4, or 0 for the default", env.ID, opts.Priority))
	}
	if opts.MaxAttempts < 0 {
		return river.InsertManyParams{}, core.Permanent(fmt.Errorf("riversink: job for message %d: max attempts %d; it must be 0 (River's default) or more", env.ID, opts.MaxAttempts))
	}
	key := core.MessageKey(s.source, s.table, env.ID)
	meta, err := withMetadata(opts.Metadata, env, key)
	if err != nil {
		return river.InsertManyParams{}, core.Permanent(fmt.Errorf("riversink: job for message %d: %w", env.ID, err))
	}
	if s.ce != nil {
		if meta, err = withCloudEvent(*s.ce, meta, env, key); err != nil {
			return river.InsertManyParams{}, core.Permanent(fmt.Errorf("riversink: %w", err))
		}
	}
	opts.Metadata = meta
	if err := checkJSONB(meta); err != nil {
		return river.InsertManyParams{}, core.Permanent(fmt.Errorf("riversink: job metadata for message %d: %w", env.ID, err))
	}
	encoded, err := json.Marshal(args)
	if err != nil {
		return river.InsertManyParams{}, core.Permanent(fmt.Errorf("riversink: job args for message %d: %w", env.ID, err))
	}
	if err := checkJSONB(encoded); err != nil {
		return river.InsertManyParams{}, core.Permanent(fmt.Errorf("riversink: job args for message %d: %w", env.ID, err))
	}
	w := &wrapped{args: args, kind: s.kind, encoded: encoded}
	if unique {
		w.Unique = s.table + "/" + strconv.FormatInt(env.ID, 10)
		if w.encoded, err = withKey(encoded, UniqueArgKey, w.Unique); err != nil {
			return river.InsertManyParams{}, core.Permanent(fmt.Errorf("riversink: job args for message %d: %w", env.ID, err))
		}
		opts.UniqueOpts.ByArgs = true
		opts.UniqueOpts.ExcludeKind = false
	}
	return river.InsertManyParams{Args: w, InsertOpts: &opts}, nil
}

// mergeOpts returns base with the fields set in over replacing it.
func mergeOpts(base river.InsertOpts, over *river.InsertOpts) river.InsertOpts {
	if over == nil {
		return base
	}
	out := base
	if over.MaxAttempts != 0 {
		out.MaxAttempts = over.MaxAttempts
	}
	if len(over.Metadata) > 0 {
		out.Metadata = over.Metadata
	}
	if over.Pending {
		out.Pending = true
	}
	if over.Priority != 0 {
		out.Priority = over.Priority
	}
	if over.Queue != "" {
		out.Queue = over.Queue
	}
	if !over.ScheduledAt.IsZero() {
		out.ScheduledAt = over.ScheduledAt
	}
	if over.Tags != nil {
		out.Tags = over.Tags
	}
	if over.UniqueOpts.ByArgs || over.UniqueOpts.ByPeriod != 0 || over.UniqueOpts.ByQueue || over.UniqueOpts.ByState != nil || over.UniqueOpts.ExcludeKind {
		out.UniqueOpts = over.UniqueOpts
	}
	return out
}

// withMetadata adds the outbox keys to a JSON object of metadata.
func withMetadata(meta []byte, env core.Envelope, key string) ([]byte, error) {
	m := map[string]any{}
	if len(meta) > 0 {
		if err := json.Unmarshal(meta, &m); err != nil {
			return nil, fmt.Errorf("insert options' Metadata must be a JSON object: %w", err)
		}
	}
	m[MetadataID] = env.ID
	m[MetadataOutbox] = env.Outbox
	m[MetadataKey] = key
	if env.GroupKey != "" {
		m[MetadataGroupKey] = env.GroupKey
	}
	if len(env.Headers) > 0 {
		m[MetadataHeaders] = env.Headers
	}
	return json.Marshal(m)
}

// withKey adds "key": value to an encoded JSON object.
func withKey(obj []byte, key, value string) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		return nil, fmt.Errorf("job args must encode as a JSON object: %w", err)
	}
	v, _ := json.Marshal(value)
	m[key] = v
	return json.Marshal(m)
}

// wrapped carries the user's args to River with the sink's kind and encoding. Unique is
// the only field River's unique-by-args check sees (the river:"unique" tag).
type wrapped struct {
	args    river.JobArgs
	kind    string
	encoded []byte
	Unique  string `json:"outboxer_unique" river:"unique"`
}

func (w *wrapped) Kind() string {
	if w.kind != "" {
		return w.kind
	}
	return w.args.Kind()
}

func (w *wrapped) MarshalJSON() ([]byte, error) { return w.encoded, nil }

// InsertOpts passes on the args' own insert options.
func (w *wrapped) InsertOpts() river.InsertOpts {
	if a, ok := w.args.(river.JobArgsWithInsertOpts); ok {
		return a.InsertOpts()
	}
	return river.InsertOpts{}
}

// Hooks passes on the args' own hooks (insert hooks run for the wrapped job).
func (w *wrapped) Hooks() []rivertype.Hook {
	if a, ok := w.args.(river.JobArgsWithHooks); ok {
		return a.Hooks()
	}
	return nil
}

// checkJSONB returns ErrNotJSONB, with what is wrong, when PostgreSQL's jsonb would
// refuse the encoded JSON b: invalid UTF-8, a \u0000 escape, or a \u escape of a
// UTF-16 surrogate that is not a high one followed by a low one. b must be valid JSON;
// what jsonb refuses beyond that (a number too large for numeric) is left to the
// database, and to the one-job-at-a-time fallback.
func checkJSONB(b []byte) error {
	if !utf8.Valid(b) {
		return fmt.Errorf("%w: invalid UTF-8", ErrNotJSONB)
	}
	if !bytes.Contains(b, []byte(`\u`)) {
		return nil
	}
	inString := false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			inString = !inString
		case c == '\\' && inString && i+1 < len(b):
			i++
			if b[i] != 'u' {
				continue
			}
			r, ok := hex4(b, i+1)
			if !ok {
				return fmt.Errorf("%w: a malformed \\u escape", ErrNotJSONB)
			}
			i += 4
			switch {
			case r == 0:
				return fmt.Errorf("%w: a \\u0000 escape (jsonb holds no NUL character)", ErrNotJSONB)
			case r >= 0xDC00 && r <= 0xDFFF:
				return fmt.Errorf("%w: a low surrogate escape \\u%04x without a high one before it", ErrNotJSONB, r)
			case r >= 0xD800 && r <= 0xDBFF:
				var low rune
				ok := i+2 < len(b) && b[i+1] == '\\' && b[i+2] == 'u'
				if ok {
					low, ok = hex4(b, i+3)
				}
				if !ok || low < 0xDC00 || low > 0xDFFF {
					return fmt.Errorf("%w: a high surrogate escape \\u%04x without a low one after it", ErrNotJSONB, r)
				}
				i += 6
			}
		}
	}
	return nil
}

// hex4 decodes the four hex digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
