package coretest

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/outboxer-go/outboxer/core"
)

// Recorder is a Relay that records the messages it confirms, unless Fail, when set,
// returns an error for a batch (nil, a *core.PartialFailure, or any error). It is safe for
// concurrent use.
//
// It records what the engine counts as delivered: after a partial failure, not the failed
// messages and not the later messages of a failed one's group in the batch (with
// OrderTotal, nothing after the first failure), which the engine hands over again later.
type Recorder struct {
	// Fail decides the result of each batch; nil means every batch is delivered.
	Fail func(batch []core.Envelope) error
	// Ordering of the outbox the recorder relays, for the rule above. Default OrderGroup.
	Ordering core.Ordering

	mu        sync.Mutex
	delivered []core.Envelope
	attempts  int
}

// Deliver records the batch and returns what Fail says.
func (r *Recorder) Deliver(ctx context.Context, batch []core.Envelope) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts++
	var err error
	if r.Fail != nil {
		err = r.Fail(batch)
	}
	if err == nil {
		r.delivered = append(r.delivered, batch...)
		return nil
	}
	// The engine finds a partial failure with errors.As, wrapped or not, and counts a
	// nil one as a delivered batch: so does the recorder.
	var pf *core.PartialFailure
	if errors.As(err, &pf) && pf == nil {
		r.delivered = append(r.delivered, batch...)
		return err
	}
	if pf != nil {
		stopped := map[string]bool{}
		for _, e := range batch {
			g := e.GroupKey
			switch r.Ordering {
			case core.OrderTotal:
				g = "all"
			case core.OrderNone:
				g = ""
			}
			if g != "" && stopped[g] {
				continue
			}
			if _, failed := pf.Failed[e.ID]; failed {
				stopped[g] = true
				continue
			}
			r.delivered = append(r.delivered, e)
		}
	}
	return err
}

// Delivered returns the messages the engine counts as delivered, in the order the relay
// was handed them.
func (r *Recorder) Delivered() []core.Envelope {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.delivered)
}

// Batches returns how many batches the relay was handed.
func (r *Recorder) Batches() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts
}

// Reset forgets what was recorded.
func (r *Recorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.delivered, r.attempts = nil, 0
}

// FailIDs returns a Fail function that fails the messages with the given IDs with err,
// every time they are handed over, and delivers the rest.
func FailIDs(err error, ids ...int64) func([]core.Envelope) error {
	return func(batch []core.Envelope) error {
		failed := map[int64]error{}
		for _, e := range batch {
			if slices.Contains(ids, e.ID) {
				failed[e.ID] = err
			}
		}
		if len(failed) == 0 {
			return nil
		}
		return &core.PartialFailure{Failed: failed}
	}
}

// FailFirst returns a Fail function that fails the first n batches whole with err.
// It is not safe for concurrent use on its own; Recorder calls it under its lock.
func FailFirst(n int, err error) func([]core.Envelope) error {
	return func([]core.Envelope) error {
		if n > 0 {
			n--
			return err
		}
		return nil
	}
}
