package riversink

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/outboxer-go/outboxer/core"
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
	// jobs inserted by Deliver. Default core.DefaultTable.
	Table string
	// Ordering must be the outbox's Ordering: it says which messages a failed one holds
	// back (its group, everything, or nothing). Default core.OrderGroup.
	Ordering core.Ordering
}

type sink struct {
	kind     string
	opts     river.InsertOpts
	job      func(core.Envelope) (river.JobArgs, *river.InsertOpts, error)
	table    string
	ordering core.Ordering
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
	s := sink{kind: opts.Kind, opts: opts.InsertOpts, job: opts.Job, table: opts.Table, ordering: opts.Ordering}
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

// Deliver inserts the batch's jobs with one InsertMany. See the package documentation.
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
// rolled back to a savepoint, so tx stays usable for the engine to record the failure.
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
	ids := make([]int64, 0, len(batch))
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
		ids = append(ids, env.ID)
	}
	if len(params) > 0 {
		if _, err := insert(ctx, params); err != nil {
			err = fmt.Errorf("riversink: insert %d job(s): %w", len(params), err)
			if len(failed) == 0 {
				return err
			}
			for _, id := range ids {
				failed[id] = err
			}
		}
	}
	if len(failed) > 0 {
		return &core.PartialFailure{Failed: failed}
	}
	return nil
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
	meta, err := withMetadata(opts.Metadata, env)
	if err != nil {
		return river.InsertManyParams{}, core.Permanent(fmt.Errorf("riversink: job for message %d: %w", env.ID, err))
	}
	opts.Metadata = meta
	encoded, err := json.Marshal(args)
	if err != nil {
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
func withMetadata(meta []byte, env core.Envelope) ([]byte, error) {
	m := map[string]any{}
	if len(meta) > 0 {
		if err := json.Unmarshal(meta, &m); err != nil {
			return nil, fmt.Errorf("insert options' Metadata must be a JSON object: %w", err)
		}
	}
	m[MetadataID] = env.ID
	m[MetadataOutbox] = env.Outbox
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
