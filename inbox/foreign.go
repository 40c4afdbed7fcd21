package inbox

import (
	"context"
	"log/slog"
)

// ForeignMessage is a message a consumer helper received that carries no key (its
// MessageOf returned an error matching ErrNoKey): one that no outboxer sink wrote, such
// as a record another producer wrote to a topic the relay shares. The helper hands it
// to its ForeignPolicy instead of the handler, outside any inbox transaction.
type ForeignMessage struct {
	// Consumer is the helper's consumer name in the inbox.
	Consumer string
	// ID names the message on its broker, for logs: "topic/partition@offset" (Kafka),
	// the message ID (SQS), the UUID (Watermill), "job <id>" (River).
	ID string
	// Payload is the message's body: the record's value, the SQS body, the Watermill
	// payload, the River job's encoded args.
	Payload []byte
	// Headers are the message's headers: the Kafka record's headers (the last value of a
	// repeated name), the SQS message attributes' string values, the Watermill metadata,
	// the River job metadata's string values.
	Headers map[string]string
	// Raw is the helper's own message: *kgo.Record, types.Message (SQS),
	// *message.Message (Watermill), *river.Job[T] (River).
	Raw any
	// Err is MessageOf's error; it matches ErrNoKey.
	Err error
}

// ForeignPolicy decides what a consumer helper does with a foreign message (one without
// a key): when it returns nil the helper acknowledges the message (Kafka: commits past
// its offset; SQS: deletes it; Watermill: acks it; River: completes the job) without
// running the handler, and reports it with the outcome Foreign; when it returns an
// error the helper fails the message as it fails a message whose handler failed (not
// acknowledged, so it comes again), and its Run, when it has one, stops with the error
// if it matches ErrNoKey (see each helper).
//
// The helpers take it as an option (kafka and sqs ConsumerConfig.OnForeign,
// watermillsink.OnForeign, riversink.OnForeign); without it they use SkipForeign with
// their logger, so a foreign message never blocks a consumer silently. The choices:
//
//   - SkipForeign(logger): skip it and log a warning (the default). To count them as
//     well, wrap it: a function that increments your metric and calls it.
//   - StopOnForeign: refuse it, an error matching ErrNoKey: Kafka's and SQS's Run stop
//     at it, Watermill's router nacks it (a broker that requeues it first, as
//     RabbitMQ does, stops the queue at it), River retries the job until it discards
//     it. Use it when such a message is a mistake that someone must look at.
//   - a function of yours: dead-letter it (write ForeignMessage.Payload and Headers to
//     a table or topic of yours) and return nil to acknowledge it, or return the
//     dead-letter's error to keep it. The acknowledgement comes after the function
//     returns, so a crash between the two hands the message to it again: make it
//     idempotent or accept a second copy.
//
// A helper calls it from the goroutine that handles the message, with the message's
// context; it must be safe for concurrent use when the helper handles messages
// concurrently (Watermill handlers, River workers).
type ForeignPolicy func(ctx context.Context, m ForeignMessage) error

// SkipForeign returns the policy that skips a foreign message: it logs a warning to
// logger (slog.Default() when nil) with the consumer, the message's ID and the error,
// and returns nil, so that the helper acknowledges the message and goes on.
func SkipForeign(logger *slog.Logger) ForeignPolicy {
	if logger == nil {
		logger = slog.Default()
	}
	return func(ctx context.Context, m ForeignMessage) error {
		logger.WarnContext(ctx, "inbox: skipped a message without a key (not written by an outboxer sink)",
			"consumer", m.Consumer, "message", m.ID, "err", m.Err)
		return nil
	}
}

// StopOnForeign is the policy that refuses a foreign message: it returns m.Err, which
// matches ErrNoKey, so the helper does not acknowledge the message and its Run stops
// with the error (Kafka, SQS); Watermill's router nacks the message and River retries
// the job. The consumer meets the message again when it restarts: use it when a
// foreign message on the consumer's topic or queue is a mistake someone must look at.
func StopOnForeign(_ context.Context, m ForeignMessage) error {
	if m.Err == nil {
		return ErrNoKey
	}
	return m.Err
}

// Logger returns the inbox's Config.Logger (slog.Default() when it was nil): the
// consumer helpers' default SkipForeign policy reports to it.
func (in *Inbox) Logger() *slog.Logger { return in.cfg.Logger }
