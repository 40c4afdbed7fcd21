package riversink

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/riverqueue/river"

	"github.com/outboxer-go/outboxer/inbox"
)

// JobHandler does a job's work in the consumer's database transaction tx, after the
// inbox claimed the job's key there. o is inbox.Claimed, or inbox.Stale with the inbox's
// stale check (a later job of the message's group ran first: River runs a group's jobs
// in parallel unless one worker takes the queue). Returning an error rolls back
// its writes and the claim, and River retries the job.
type JobHandler[T river.JobArgs] func(ctx context.Context, tx *sql.Tx, job *river.Job[T], o inbox.Outcome) error

// InboxWorker is a River worker that runs a JobHandler with an inbox: each job in a
// database transaction (on the inbox's Config.DB) that first claims the job's key
// (MetadataKey), so that a job that runs again (River retries a job whose worker
// crashed or timed out after its effect committed; a message inserted twice outside
// River's unique check) does not run the handler a second time. The job completes
// after the commit (River marks it when Work returns nil); a duplicate completes
// without running the handler. Register it with river.AddWorker.
//
// River completes the job in a transaction of its own, after Work's: a crash between
// the two runs the job again, and the inbox reports it as a duplicate. When the inbox
// lives in River's database and the client uses riverdatabasesql, the handler may also
// complete the job in its own transaction with river.JobCompleteTx.
//
// Embedded river.WorkerDefaults give River's retry policy and timeout; to set your
// own, embed *InboxWorker[T] in a type of yours with NextRetry or Timeout methods.
//
// A job without a key (MetadataKey: one the sink did not insert, such as a job another
// part of the application inserts with the same kind) does not reach the handler: the
// OnForeign option, an inbox.ForeignPolicy, decides. When it returns nil the job
// completes; when it returns an error the job fails with it, and River retries it (and
// discards it after its maximum attempts). By default (inbox.SkipForeign with the
// inbox's logger) the job completes with a warning; inbox.StopOnForeign fails it with
// an error matching inbox.ErrNoKey.
type InboxWorker[T river.JobArgs] struct {
	river.WorkerDefaults[T]
	in        *inbox.Inbox
	consumer  string
	handle    JobHandler[T]
	onForeign inbox.ForeignPolicy
}

// ConsumerOption configures NewInboxWorker.
type ConsumerOption func(*consumerOptions)

type consumerOptions struct {
	onForeign inbox.ForeignPolicy
}

// OnForeign sets what the worker does with a job without a key (see InboxWorker); nil
// keeps the default, inbox.SkipForeign with the inbox's logger.
func OnForeign(p inbox.ForeignPolicy) ConsumerOption {
	return func(o *consumerOptions) { o.onForeign = p }
}

// NewInboxWorker returns a worker running handle for consumer with in. It refuses a nil
// inbox, handler or option and an empty consumer name.
func NewInboxWorker[T river.JobArgs](in *inbox.Inbox, consumer string, handle JobHandler[T], opts ...ConsumerOption) (*InboxWorker[T], error) {
	switch {
	case in == nil:
		return nil, fmt.Errorf("riversink: NewInboxWorker: the inbox is nil")
	case consumer == "":
		return nil, fmt.Errorf("riversink: NewInboxWorker: the consumer name is empty")
	case handle == nil:
		return nil, fmt.Errorf("riversink: NewInboxWorker: the handler is nil")
	}
	var o consumerOptions
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("riversink: NewInboxWorker: option %d is nil", i)
		}
		opt(&o)
	}
	if o.onForeign == nil {
		o.onForeign = inbox.SkipForeign(in.Logger())
	}
	return &InboxWorker[T]{in: in, consumer: consumer, handle: handle, onForeign: o.onForeign}, nil
}

// MessageOf returns what the inbox needs of a job the sink inserted, from its metadata:
// its key (MetadataKey) and, for the inbox's stale check, its group (the outbox and
// MetadataGroupKey, see inbox.GroupOf) and position (MetadataID). It returns an error
// matching inbox.ErrNoKey when the job has no key (the sink did not insert it). The
// names are matched exactly: metadata of the user's own under a name that differs in
// case (which Go's JSON decoder would take for a struct field) is not the key.
func MessageOf(metadata []byte) (inbox.Message, error) {
	var raw map[string]json.RawMessage
	if len(metadata) > 0 {
		if err := json.Unmarshal(metadata, &raw); err != nil {
			return inbox.Message{}, fmt.Errorf("riversink: job metadata: %w", err)
		}
	}
	var key, outbox, group string
	var id int64
	for name, v := range map[string]any{MetadataKey: &key, MetadataID: &id, MetadataOutbox: &outbox, MetadataGroupKey: &group} {
		if r, ok := raw[name]; ok {
			if err := json.Unmarshal(r, v); err != nil {
				return inbox.Message{}, fmt.Errorf("riversink: job metadata %s: %w", name, err)
			}
		}
	}
	if key == "" {
		return inbox.Message{}, fmt.Errorf("riversink: job metadata: %w", inbox.ErrNoKey)
	}
	msg := inbox.Message{Key: key}
	if id > 0 {
		msg.Seq, msg.Group = id, inbox.GroupOf(outbox, group)
	}
	return msg, nil
}

// Work claims the job's key and runs the handler in one transaction; see InboxWorker.
func (w *InboxWorker[T]) Work(ctx context.Context, job *river.Job[T]) error {
	m, err := MessageOf(job.Metadata)
	if errors.Is(err, inbox.ErrNoKey) {
		if err := w.onForeign(ctx, foreignJob(w.consumer, job, err)); err != nil {
			return fmt.Errorf("riversink: job %d: %w", job.ID, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("riversink: job %d: %w", job.ID, err)
	}
	_, err = w.in.Handle(ctx, w.consumer, m, func(ctx context.Context, tx *sql.Tx, o inbox.Outcome) error {
		return w.handle(ctx, tx, job, o)
	})
	if err != nil {
		return fmt.Errorf("riversink: job %d: %w", job.ID, err)
	}
	return nil
}

// foreignJob is what the OnForeign policy receives of a job without a key: its encoded
// args, and its metadata's string values as headers.
func foreignJob[T river.JobArgs](consumer string, job *river.Job[T], noKey error) inbox.ForeignMessage {
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(job.Metadata, &raw) // MessageOf read it: it is an object or empty
	hdr := make(map[string]string, len(raw))
	for name, v := range raw {
		var s string
		if json.Unmarshal(v, &s) == nil {
			hdr[name] = s
		}
	}
	return inbox.ForeignMessage{Consumer: consumer, ID: fmt.Sprintf("job %d", job.ID),
		Payload: job.EncodedArgs, Headers: hdr, Raw: job, Err: noKey}
}
