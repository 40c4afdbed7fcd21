package core

import (
	"context"
	"errors"
	"fmt"
)

// This file is the relay toolkit: PerMessage writes a Relay from a function that
// delivers one message, and Filter, Map and FanOut wrap relays. Each returns the
// *PartialFailure and ErrHeldBack results the engine expects, so that a wrapped relay
// keeps the order of its groups and counts attempts only for messages it tried.
//
// The wrappers forward Start and Close to the relays they wrap (see Starter and
// Closer). They deliver with Deliver only: a TxRelay they wrap delivers outside the
// outbox's transaction.

// PerMessage returns a Relay that delivers a batch by calling deliver for each message,
// in order, and turns the results into the error the engine expects for ordering, the
// Ordering of the outbox the relay serves:
//
//   - OrderGroup: after a message of a group fails, the later messages of that group in
//     the batch are not tried (they are named with ErrHeldBack: no attempt counted) and
//     go again, in order, in a later batch; other groups and unordered messages go on;
//   - OrderTotal: after a failure, no later message of the batch is tried;
//   - OrderNone: every message is tried.
//
// A message whose deliver returns an error matching ErrPermanent is dead at once; the
// later messages of its group still wait for the next batch, as the engine has them do.
// When ctx ends, the messages not tried yet are held back. deliver must be safe to call
// from several goroutines when the outbox has several partitions.
func PerMessage(ordering Ordering, deliver func(ctx context.Context, env Envelope) error) Relay {
	return perMessage{ordering: ordering, deliver: deliver}
}

type perMessage struct {
	ordering Ordering
	deliver  func(ctx context.Context, env Envelope) error
}

func (p perMessage) Deliver(ctx context.Context, batch []Envelope) error {
	h := newHolder(p.ordering)
	for _, env := range batch {
		if h.held(env) {
			continue
		}
		if err := ctx.Err(); err != nil {
			h.hold(env, err)
			continue
		}
		if err := p.deliver(ctx, env); err != nil {
			h.fail(env, err)
		}
	}
	return h.result()
}

// holder collects per-message results and decides which messages to hold back.
type holder struct {
	ordering Ordering
	failed   map[int64]error
	stopped  map[string]bool
	all      bool // OrderTotal: a message failed, everything after waits
}

func newHolder(o Ordering) *holder { return &holder{ordering: o} }

// held reports whether env waits behind an earlier failure, and if so records it.
func (h *holder) held(env Envelope) bool {
	switch {
	case h.ordering == OrderTotal && h.all,
		h.ordering == OrderGroup && env.GroupKey != "" && h.stopped[env.GroupKey]:
		h.record(env.ID, ErrHeldBack)
		return true
	}
	return false
}

// hold names env as not tried, because of why.
func (h *holder) hold(env Envelope, why error) {
	h.record(env.ID, fmt.Errorf("%w: %w", ErrHeldBack, why))
	h.stop(env)
}

// fail names env as tried and failed with err.
func (h *holder) fail(env Envelope, err error) {
	h.record(env.ID, err)
	h.stop(env)
}

func (h *holder) stop(env Envelope) {
	switch h.ordering {
	case OrderTotal:
		h.all = true
	case OrderGroup:
		if env.GroupKey != "" {
			if h.stopped == nil {
				h.stopped = map[string]bool{}
			}
			h.stopped[env.GroupKey] = true
		}
	}
}

func (h *holder) record(id int64, err error) {
	if h.failed == nil {
		h.failed = map[int64]error{}
	}
	h.failed[id] = err
}

func (h *holder) result() error {
	if len(h.failed) == 0 {
		return nil
	}
	return &PartialFailure{Failed: h.failed}
}

// failures returns, for the batch given to a relay, what its result err says failed:
// nothing for nil, the messages a *PartialFailure names, or every message for any other
// error.
func failures(batch []Envelope, err error) map[int64]error {
	if err == nil {
		return nil
	}
	var pf *PartialFailure
	if errors.As(err, &pf) {
		return pf.Failed
	}
	failed := make(map[int64]error, len(batch))
	for _, env := range batch {
		failed[env.ID] = err
	}
	return failed
}

// Filter returns a Relay that hands next only the messages keep accepts. The others
// count as delivered: they are dropped. keep must not block; it runs for every message
// of every batch, a message held back by next included when it comes again.
func Filter(next Relay, keep func(env Envelope) bool) Relay {
	return &filterRelay{wrapper: wrapper{next}, keep: keep}
}

type filterRelay struct {
	wrapper
	keep func(Envelope) bool
}

func (f *filterRelay) Deliver(ctx context.Context, batch []Envelope) error {
	kept := make([]Envelope, 0, len(batch))
	for _, env := range batch {
		if f.keep(env) {
			kept = append(kept, env)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	err := f.next.Deliver(ctx, kept)
	if err == nil || len(kept) == len(batch) {
		return err
	}
	// Name only the kept messages: a dropped one is delivered whatever next says.
	return &PartialFailure{Failed: failures(kept, err)}
}

// Map returns a Relay that hands next each message as transform returns it (another
// payload, type or headers; the ID, outbox, group key and partition it returns are
// ignored, so that the engine's bookkeeping cannot change). A message transform fails
// is not delivered, with transform's error (wrap it with Permanent if retrying cannot
// help), and the later messages of its group (with OrderTotal, of the batch) are held
// back, as PerMessage does; ordering is the Ordering of the outbox.
func Map(ordering Ordering, next Relay, transform func(ctx context.Context, env Envelope) (Envelope, error)) Relay {
	return &mapRelay{wrapper: wrapper{next}, ordering: ordering, transform: transform}
}

type mapRelay struct {
	wrapper
	ordering  Ordering
	transform func(context.Context, Envelope) (Envelope, error)
}

func (m *mapRelay) Deliver(ctx context.Context, batch []Envelope) error {
	h := newHolder(m.ordering)
	out := make([]Envelope, 0, len(batch))
	for _, env := range batch {
		if h.held(env) {
			continue
		}
		mapped, err := m.transform(ctx, env)
		if err != nil {
			h.fail(env, fmt.Errorf("outboxer: map message %d: %w", env.ID, err))
			continue
		}
		mapped.ID, mapped.Outbox, mapped.GroupKey, mapped.Partition = env.ID, env.Outbox, env.GroupKey, env.Partition
		out = append(out, mapped)
	}
	if len(out) > 0 {
		err := m.next.Deliver(ctx, out)
		if err != nil && len(h.failed) == 0 {
			return err // next saw the whole batch: its result stands as it is
		}
		for id, e := range failures(out, err) {
			h.record(id, e)
		}
	}
	return h.result()
}

// FanOut returns a Relay that delivers every message to each relay in turn: first to
// relays[0], then what it delivered to relays[1], and so on. A message counts as
// delivered once every relay delivered it. A message one relay failed goes again in a
// later batch to every relay, so a relay before the one that failed may receive it
// twice (delivery is at least once). ordering is the Ordering of the outbox: a later
// relay never receives a message that an earlier one failed or held back, nor, with
// OrderGroup, a later message of its group (with OrderTotal, any later message), so
// that each relay receives every group in order. A message a relay refused for good
// (ErrPermanent) is dead and no later relay gets it.
func FanOut(ordering Ordering, relays ...Relay) Relay {
	return &fanOut{ordering: ordering, relays: relays}
}

type fanOut struct {
	ordering Ordering
	relays   []Relay
}

func (f *fanOut) Deliver(ctx context.Context, batch []Envelope) error {
	h := newHolder(f.ordering)
	rest := batch
	for i, r := range f.relays {
		if len(rest) == 0 {
			break
		}
		err := r.Deliver(ctx, rest)
		if err == nil {
			continue
		}
		if i == 0 && !errors.As(err, new(*PartialFailure)) {
			return err // nothing delivered anywhere: the error stands as it is
		}
		fail := failures(rest, err)
		next := make([]Envelope, 0, len(rest))
		for _, env := range rest {
			if h.held(env) {
				continue
			}
			if e, ok := fail[env.ID]; ok {
				h.fail(env, e)
				continue
			}
			next = append(next, env)
		}
		rest = next
	}
	return h.result()
}

// Start starts every relay that is a Starter, in order.
func (f *fanOut) Start(ctx context.Context) error {
	for _, r := range f.relays {
		if s, ok := r.(Starter); ok {
			if err := s.Start(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close closes every relay that is a Closer and returns their errors joined.
func (f *fanOut) Close() error {
	var errs []error
	for _, r := range f.relays {
		if c, ok := r.(Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// wrapper forwards Start, Close and Unwrap to the relay it wraps.
type wrapper struct{ next Relay }

// Unwrap returns the wrapped relay, so that the engine names its type in telemetry.
func (w wrapper) Unwrap() Relay { return w.next }

// Start starts the wrapped relay if it is a Starter.
func (w wrapper) Start(ctx context.Context) error {
	if s, ok := w.next.(Starter); ok {
		return s.Start(ctx)
	}
	return nil
}

// Close closes the wrapped relay if it is a Closer.
func (w wrapper) Close() error {
	if c, ok := w.next.(Closer); ok {
		return c.Close()
	}
	return nil
}
