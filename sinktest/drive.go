package sinktest

import (
	"context"
	"errors"
	"fmt"

	"github.com/outboxer-go/outboxer/core"
)

// DriveOptions tune Drive.
type DriveOptions struct {
	// BatchSize is the most messages handed to Deliver at once. Default 100.
	BatchSize int
	// BeforeDeliver, when set, is called before every call to Deliver with the number of
	// calls made so far (0 for the first). Tests use it to inject failures.
	BeforeDeliver func(call int)
}

// DriveResult says how Drive went.
type DriveResult struct {
	// Calls is how many times Deliver was called.
	Calls int
	// Failures is how many calls returned an error (partial or not).
	Failures int
	// Dead maps the ID of each message the relay refused permanently to its error.
	Dead map[int64]error
}

// Drive delivers envs through r the way the engine does, until every message is
// delivered or dead, or ctx is done. envs must be in ID order.
//
// It hands r batches of at most BatchSize pending messages in ID order. After a call:
//   - nil: the whole batch is delivered;
//   - a *core.PartialFailure: the messages it names are not delivered, nor is any message
//     after a failed one of the same group (whatever the relay says); messages named
//     with an error matching core.ErrPermanent are dead and do not hold back their group;
//   - another error matching core.ErrPermanent: the whole batch is dead;
//   - any other error: nothing is delivered.
//
// Undelivered messages stay pending and are handed again, in ID order, in the next call.
// Drive returns ctx's error, wrapped, if ctx ends first.
func Drive(ctx context.Context, r core.Relay, envs []core.Envelope, opts DriveOptions) (DriveResult, error) {
	size := opts.BatchSize
	if size <= 0 {
		size = core.DefaultBatchSize
	}
	res := DriveResult{Dead: map[int64]error{}}
	pending := append([]core.Envelope(nil), envs...)
	for len(pending) > 0 {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("sinktest: %d message(s) still pending after %d call(s): %w", len(pending), res.Calls, err)
		}
		batch := pending[:min(size, len(pending))]
		if opts.BeforeDeliver != nil {
			opts.BeforeDeliver(res.Calls)
		}
		err := r.Deliver(ctx, batch)
		res.Calls++
		if err != nil {
			res.Failures++
		}
		failed, dead := Outcome(batch, err)
		for id, e := range dead {
			res.Dead[id] = e
		}
		rest := make([]core.Envelope, 0, len(pending))
		for _, env := range batch {
			if _, ok := failed[env.ID]; ok {
				rest = append(rest, env)
			}
		}
		pending = append(rest, pending[len(batch):]...)
	}
	return res, nil
}

// Outcome applies the engine's rules to the result err of delivering batch: it returns
// the IDs still pending (failed, or after a failed message of the same group) and the
// IDs that are dead (refused with an error matching core.ErrPermanent), with their
// errors. Every other message of the batch counts as delivered.
func Outcome(batch []core.Envelope, err error) (pending map[int64]bool, dead map[int64]error) {
	pending, dead = map[int64]bool{}, map[int64]error{}
	if err == nil {
		return pending, dead
	}
	var pf *core.PartialFailure
	if !errors.As(err, &pf) {
		for _, env := range batch {
			if errors.Is(err, core.ErrPermanent) {
				dead[env.ID] = err
			} else {
				pending[env.ID] = true
			}
		}
		return pending, dead
	}
	blocked := map[string]bool{}
	for _, env := range batch {
		e, named := pf.Failed[env.ID]
		switch {
		case env.GroupKey != "" && blocked[env.GroupKey]:
			pending[env.ID] = true
		case named && errors.Is(e, core.ErrPermanent):
			dead[env.ID] = e
		case named:
			pending[env.ID] = true
			if env.GroupKey != "" {
				blocked[env.GroupKey] = true
			}
		}
	}
	return pending, dead
}
