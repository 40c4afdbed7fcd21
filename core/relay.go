package core

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Relay delivers messages to where they go next (a broker, a job queue, a handler).
//
// Deliver receives a batch in order and must deliver it in that order. Its result says
// what happened:
//   - nil: every message was delivered;
//   - a *PartialFailure: every message except the ones it names was delivered;
//   - any other error: nothing was delivered.
//
// A batch of several messages that fails with any other error is not charged as a
// whole: the engine hands it over again in smaller parts (halves, down to one message,
// each with a delivery timeout of its own, in batch order and never past a message of
// the same group that was not delivered), so that the attempt, and the dead-lettering
// after MaxAttempts, land on the message that fails, not on its batch-mates. Deliver may
// therefore be called again at once with part of a batch it just failed.
//
// Errors wrapped with Permanent are not retried: the message is dead at once.
// Deliver must honour ctx: the engine cancels it when the delivery timeout passes or the
// worker may have lost its partition, and a relay that keeps sending after that can break
// the order a later owner keeps.
//
// A Relay that wraps another one (to trace or measure its deliveries) may have a method
// Unwrap() Relay returning the relay it wraps: the engine then names the wrapped relay's
// type in BatchEvent.Relay, so telemetry does not change when a wrapper is added.
type Relay interface {
	Deliver(ctx context.Context, batch []Envelope) error
}

// RelayFunc adapts a function to a Relay.
type RelayFunc func(ctx context.Context, batch []Envelope) error

// Deliver calls f.
func (f RelayFunc) Deliver(ctx context.Context, batch []Envelope) error { return f(ctx, batch) }

// TxRelay is implemented by relays that can deliver inside the outbox's own database
// transaction (a job queue in the same database). The engine then inserts the delivery
// and removes the delivered rows in one transaction: a crash can duplicate nothing.
// The engine calls DeliverTx instead of Deliver when the relay implements it.
//
// When the transaction cannot commit after DeliverTx returned a PartialFailure (a failed
// statement aborted it, on PostgreSQL, or the failed message used up the delivery
// timeout), only the messages it names are charged; the others are handed over again at
// once, without them, in a new transaction. A plain error is narrowed as for Deliver.
type TxRelay interface {
	Relay
	DeliverTx(ctx context.Context, tx *sql.Tx, batch []Envelope) error
}

// Starter is implemented by relays that must be started before the first delivery.
// Run calls Start before any worker starts. A failing Start is tried again later, with
// Run's start-up backoff and an Error log line each time (a broker that is not up yet
// is waited for, like the database), unless its error is marked with Permanent or
// matches ErrInvalidConfig: Run then returns it at once. Start is not called again once
// it succeeded.
type Starter interface {
	Start(ctx context.Context) error
}

// Closer is implemented by relays that hold resources. Run calls Close once after the
// last delivery, when it returns. A Run whose start-up failed for good closes only the
// relays whose Start it called successfully, so the others can be given to Run again.
type Closer interface {
	Close() error
}

// PartialFailure is the error a Relay returns when some messages of a batch were
// delivered and others were not. Failed maps the ID of each undelivered message to why.
// A nil *PartialFailure (returned as a non-nil error) names nothing: the batch counts as
// delivered.
// Every message of the batch not named in Failed counts as delivered, except that a
// message after a failed one of the same group (in OrderTotal, after any failed one) is
// never counted delivered: it stays pending and goes again, in order, in a later batch.
type PartialFailure struct {
	Failed map[int64]error
}

// Error lists the failed IDs.
func (e *PartialFailure) Error() string {
	if e == nil {
		return "outboxer: 0 message(s) not delivered"
	}
	ids := slices.Sorted(maps.Keys(e.Failed))
	var b strings.Builder
	fmt.Fprintf(&b, "outboxer: %d message(s) not delivered:", len(ids))
	for i, id := range ids {
		if i == 5 {
			fmt.Fprintf(&b, " and %d more", len(ids)-i)
			break
		}
		fmt.Fprintf(&b, " %d (%v)", id, e.Failed[id])
	}
	return b.String()
}

// Unwrap returns the individual errors, so errors.Is and errors.As see them.
func (e *PartialFailure) Unwrap() []error {
	if e == nil {
		return nil
	}
	errs := make([]error, 0, len(e.Failed))
	for _, id := range slices.Sorted(maps.Keys(e.Failed)) {
		errs = append(errs, e.Failed[id])
	}
	return errs
}

// ErrHeldBack, named for a message in a PartialFailure, says the relay did not try it
// (it held it back behind another failure). The message stays pending with no attempt
// counted, and so do the later messages of its group in the batch.
var ErrHeldBack = errors.New("held back")

// ErrPermanent marks an error that retrying cannot fix (a message too large for the
// broker, a payload it rejects). Test with errors.Is.
var ErrPermanent = errors.New("permanent failure")

type permanentError struct{ err error }

func (e permanentError) Error() string   { return e.err.Error() }
func (e permanentError) Unwrap() []error { return []error{e.err, ErrPermanent} }

// Permanent marks err as not retryable: a message that fails with it is dead at once,
// whatever MaxAttempts says, so that it cannot block its group forever.
func Permanent(err error) error {
	if err == nil || errors.Is(err, ErrPermanent) {
		return err
	}
	return permanentError{err}
}
