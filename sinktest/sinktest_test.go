package sinktest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/sinktest"
)

// memBroker is an in-memory destination: the suite's own test, and a template for a
// harness. A send is one slice of at most limit messages.
type memBroker struct {
	limit, maxBytes int

	mu      sync.Mutex
	cond    *sync.Cond
	log     []sinktest.Received
	failing int
	down    bool
}

func newMemBroker(limit, maxBytes int) *memBroker {
	b := &memBroker{limit: limit, maxBytes: maxBytes}
	b.cond = sync.NewCond(&b.mu)
	return b
}

var errDown = fmt.Errorf("broker unreachable")

// send appends msgs unless the broker is down or refuses this send.
func (b *memBroker) send(msgs []core.Envelope) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.down {
		return errDown
	}
	if b.failing > 0 {
		b.failing--
		return fmt.Errorf("broker busy")
	}
	for _, e := range msgs {
		b.log = append(b.log, sinktest.Received{ID: e.ID, Outbox: e.Outbox, Type: e.Type, GroupKey: e.GroupKey, Payload: e.Payload, Headers: e.Headers})
	}
	b.cond.Broadcast()
	return nil
}

// Deliver sends the batch in chunks of limit, holding back the rest of a group after a
// failed chunk and refusing oversize messages permanently.
func (b *memBroker) Deliver(ctx context.Context, batch []core.Envelope) error {
	failed := map[int64]error{}
	blocked := map[string]bool{}
	fail := func(e core.Envelope, err error) {
		failed[e.ID] = err
		if e.GroupKey != "" {
			blocked[e.GroupKey] = true
		}
	}
	var chunk []core.Envelope
	flush := func() {
		if len(chunk) == 0 {
			return
		}
		if err := b.send(chunk); err != nil {
			for _, e := range chunk {
				fail(e, err)
			}
		}
		chunk = chunk[:0]
	}
	for _, e := range batch {
		if err := ctx.Err(); err != nil {
			fail(e, err)
			continue
		}
		switch {
		case e.GroupKey != "" && blocked[e.GroupKey]:
			failed[e.ID] = fmt.Errorf("held back behind a failed message of group %q", e.GroupKey)
		case len(e.Payload) > b.maxBytes:
			failed[e.ID] = core.Permanent(fmt.Errorf("message %d: payload of %d bytes is too large", e.ID, len(e.Payload)))
		default:
			chunk = append(chunk, e)
			if len(chunk) == b.limit {
				flush()
			}
			continue
		}
		flush() // keep the order: what was queued before goes first
	}
	flush()
	if len(failed) > 0 {
		return &core.PartialFailure{Failed: failed}
	}
	return nil
}

func (b *memBroker) Read(ctx context.Context, n int) ([]sinktest.Received, error) {
	stop := context.AfterFunc(ctx, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.cond.Broadcast()
	})
	defer stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.log) < n && ctx.Err() == nil {
		b.cond.Wait()
	}
	out := append([]sinktest.Received(nil), b.log...)
	if len(out) < n {
		return out, ctx.Err()
	}
	return out, nil
}

func TestRunInMemory(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{
		New: func(t *testing.T) *sinktest.Target {
			b := newMemBroker(10, 1024)
			return &sinktest.Target{
				Relay:    b,
				Read:     b.Read,
				FailNext: func(n int) { b.mu.Lock(); b.failing += n; b.mu.Unlock() },
				Stop:     func() { b.mu.Lock(); b.down = true; b.mu.Unlock() },
				Start:    func() { b.mu.Lock(); b.down = false; b.mu.Unlock() },
			}
		},
		BatchLimit:      10,
		MaxMessageBytes: 1024,
		Parallel:        true,
	})
}

func TestOutcomeHoldsBackGroup(t *testing.T) {
	envs := sinktest.Envelopes(6, 2)
	err := &core.PartialFailure{Failed: map[int64]error{
		1: fmt.Errorf("busy"),
		2: core.Permanent(fmt.Errorf("too large")),
	}}
	pending, dead := sinktest.Outcome(envs, err)
	// g0 = 1, 3, 5 is held back behind 1; 2 is dead and does not hold back g1 (4, 6).
	for _, id := range []int64{1, 3, 5} {
		if !pending[id] {
			t.Errorf("message %d not pending", id)
		}
	}
	for _, id := range []int64{4, 6} {
		if pending[id] {
			t.Errorf("message %d pending, want delivered", id)
		}
	}
	if _, ok := dead[2]; !ok || len(dead) != 1 {
		t.Errorf("dead = %v, want only 2", dead)
	}
	pending, dead = sinktest.Outcome(envs, fmt.Errorf("connection refused"))
	if len(pending) != len(envs) || len(dead) != 0 {
		t.Errorf("plain error: pending %d dead %d, want all pending", len(pending), len(dead))
	}
	_, dead = sinktest.Outcome(envs, core.Permanent(fmt.Errorf("rejected")))
	if len(dead) != len(envs) {
		t.Errorf("permanent error: %d dead, want all", len(dead))
	}
}
