package core

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/outboxer-go/outboxer/core/internal/dialect"
)

// A batch whose delivery fails as a whole (the relay returned a plain error: nothing was
// delivered) does not charge an attempt to each of its messages: one poison message
// would make its batch-mates of other groups dead with it. The engine narrows the batch
// instead: it hands over each half on its own, then each half of a half that fails, down
// to one message, so that the attempt and the dead-lettering land on the message that
// really fails. A TxRelay whose transaction could not commit after a PartialFailure (a
// failed statement aborted it on PostgreSQL, or the failed message used up the
// deadline) has only the messages it named charged; the others go again at once in a
// transaction of their own.
//
// Order is kept: the parts go in batch order, and a message whose group has a message
// not delivered before it in the batch is not handed over (it stays pending, no attempt
// counted, and goes in a later batch behind the failed one). Each part has a delivery
// deadline of its own; the narrowing stops handing over parts when the worker is
// stopping, its lease cannot be renewed, its outbox is paused, or the engine itself cut a
// delivery short, and what was not tried then stays pending with no attempt counted.
//
// A part that ran into the delivery timeout costs a whole timeout to try again, and a
// broker that does not answer at all fails every part that way: narrowing a batch of n
// would wait out 2n-1 timeouts before anything is charged. So before a part that timed
// out is split further, its second half (less the groups of the first, which wait for
// it) is tried beside its first: when both run into the timeout too, the broker is down,
// not one message, and the narrowing stops. Every message not delivered is then charged
// as a failed batch is (the first of each group; the rest wait behind it): three
// timeouts in all, whatever the batch. A message that makes its batch hang is found in
// one timeout per halving.

// tried is what came of handing part of a batch to the relay once.
type tried struct {
	out outcome
	// whole: the relay failed the part as a whole, nothing of it was delivered, and a
	// smaller part may fare better.
	whole bool
	// again: the messages the relay delivered in a transaction another message's failure
	// spoiled; they were not delivered and go again without it.
	again []Envelope
	// stop: hand over nothing more now (the engine cut the delivery short).
	stop bool
	// err: the relay was not called (the lease was lost, the database is away).
	err error
}

// narrowing delivers a batch part by part after its delivery as a whole failed.
type narrowing struct {
	w       *worker
	ctx     context.Context // once it is done, nothing more is handed over
	bctx    context.Context // the parent of each part's delivery context
	deliver func(dctx context.Context, part []Envelope) tried
	stopped map[string]bool // groups with a message not delivered: their later ones wait
	settled map[int64]bool  // the messages whose outcome is in out, or that wait (stopped)
	out     outcome
	halt    bool
	// down is the error of a broker that ran into the delivery timeout whichever part
	// it was handed (see above); nil while none did.
	down error
}

// deliverNarrowed delivers batch: first as a whole, with the delivery context dctx, then,
// if that failed as a whole, part by part (see above). It returns the combined outcome;
// an error only when the relay could not be called for the batch at all.
func (w *worker) deliverNarrowed(ctx, bctx, dctx context.Context, batch []Envelope,
	deliver func(dctx context.Context, part []Envelope) tried) (outcome, error) {
	first := deliver(dctx, batch)
	if first.err != nil {
		return outcome{}, first.err
	}
	n := &narrowing{w: w, ctx: ctx, bctx: bctx, deliver: deliver, stopped: map[string]bool{}, settled: map[int64]bool{}}
	n.settle(batch, first, timedOut(dctx))
	if n.down != nil {
		n.chargeRest(batch)
	}
	out := n.out
	out.held = len(batch) - len(out.delivered) - len(out.failed) - len(out.dead)
	return out, nil
}

// settle records what came of delivering part (to: the delivery ran into the delivery
// timeout) and narrows further where it failed.
func (n *narrowing) settle(part []Envelope, t tried, to bool) {
	if t.err != nil || t.stop {
		n.halt = true
	}
	if t.whole && len(part) > 1 && !n.halt {
		mid := len(part) / 2
		if to {
			n.splitTimedOut(part[:mid], part[mid:])
			return
		}
		n.try(part[:mid])
		n.try(part[mid:])
		return
	}
	n.out.delivered = append(n.out.delivered, t.out.delivered...)
	n.out.failed = append(n.out.failed, t.out.failed...)
	n.out.dead = append(n.out.dead, t.out.dead...)
	went := make(map[int64]bool, len(t.out.delivered)+len(t.again))
	for _, id := range t.out.delivered {
		went[id] = true
	}
	for i := range t.again {
		went[t.again[i].ID] = true
	}
	for i := range part {
		if !went[part[i].ID] {
			n.settled[part[i].ID] = true
			n.stop(&part[i])
		}
	}
	for _, id := range t.out.delivered {
		n.settled[id] = true
	}
	if len(t.again) > 0 {
		n.try(t.again)
	}
}

// splitTimedOut narrows a part that ran into the delivery timeout, in halves first and
// second. The second half's messages of the first half's groups wait for the first half's
// narrowing; the others are tried beside the first half before it is split: when both
// time out, the broker is down (see above).
func (n *narrowing) splitTimedOut(first, second []Envelope) {
	a, ta, toA, ok := n.call(first)
	if !ok {
		n.try(second)
		return
	}
	if !ta.whole || !toA || n.halt {
		n.settle(a, ta, toA)
		n.try(second)
		return
	}
	groups := make(map[string]bool, len(a))
	for i := range a {
		if g := n.w.group(&a[i]); g != "" {
			groups[g] = true
		}
	}
	var beside, behind []Envelope
	for i := range second {
		if g := n.w.group(&second[i]); g != "" && groups[g] {
			behind = append(behind, second[i])
		} else {
			beside = append(beside, second[i])
		}
	}
	b, tb, toB, ok := n.call(beside)
	if ok && tb.whole && toB {
		var err error
		if len(tb.out.failed) > 0 {
			err = tb.out.failed[0].err
		} else if len(tb.out.dead) > 0 {
			err = tb.out.dead[0].err
		}
		if err == nil {
			err = context.DeadlineExceeded
		}
		n.down, n.halt = err, true
	}
	n.settle(a, ta, toA)
	if ok {
		n.settle(b, tb, toB)
	}
	n.try(behind)
}

// chargeRest charges the messages of batch the narrowing did not settle, after the broker
// was found down: the first of each group, as a failed batch is; the rest of a group
// waits behind it, and so does the rest of a group stopped already.
func (n *narrowing) chargeRest(batch []Envelope) {
	var rest []Envelope
	for i := range batch {
		if n.settled[batch[i].ID] {
			continue
		}
		if g := n.w.group(&batch[i]); g != "" && n.stopped[g] {
			continue
		}
		rest = append(rest, batch[i])
	}
	if len(rest) == 0 {
		return
	}
	out := n.w.judge(n.bctx, rest, n.down)
	n.out.failed = append(n.out.failed, out.failed...)
	n.out.dead = append(n.out.dead, out.dead...)
}

// stop holds back the rest of e's group.
func (n *narrowing) stop(e *Envelope) {
	if g := n.w.group(e); g != "" {
		n.stopped[g] = true
	}
}

// try hands part to the relay with a deadline of its own, leaving out the messages
// behind a failure of their group, and settles what came of it.
func (n *narrowing) try(part []Envelope) {
	if open, t, to, ok := n.call(part); ok {
		n.settle(open, t, to)
	}
}

// call hands the messages of part not behind a failure of their group to the relay, with
// a deadline of their own. It returns them, what came of it and whether the delivery ran
// into the delivery timeout; ok is false when nothing was handed over.
func (n *narrowing) call(part []Envelope) (open []Envelope, t tried, to, ok bool) {
	if n.halt {
		return nil, tried{}, false, false
	}
	open = make([]Envelope, 0, len(part))
	for i := range part {
		if g := n.w.group(&part[i]); g == "" || !n.stopped[g] {
			open = append(open, part[i])
		}
	}
	if len(open) == 0 {
		return nil, tried{}, false, false
	}
	w := n.w
	if n.ctx.Err() != nil || w.ob.pauses.Load() != w.pauses {
		n.halt = true
		return nil, tried{}, false, false
	}
	if w.due() {
		if err := w.renew(n.ctx); err != nil || w.paused {
			n.halt = true
			return nil, tried{}, false, false
		}
	}
	dctx, cancel := w.deliveryContext(n.bctx)
	t = n.deliver(dctx, open)
	to = timedOut(dctx)
	cancel()
	return open, t, to, true
}

// timedOut reports whether the delivery with context dctx ran into the delivery timeout
// (not into a cut the engine made).
func timedOut(dctx context.Context) bool {
	return dctx.Err() != nil && errors.Is(context.Cause(dctx), context.DeadlineExceeded)
}

// deliveryContext is the context of one delivery: it ends at the delivery timeout, or
// before the lease could run out (with errLeaseEnding as its cause).
func (w *worker) deliveryContext(parent context.Context) (context.Context, context.CancelFunc) {
	deadline := time.Now().Add(w.ob.cfg.DeliveryTimeout)
	var cause error // the delivery timeout is the relay's: a failed attempt
	if !w.until.After(deadline) {
		deadline, cause = w.until, errLeaseEnding
	}
	return context.WithDeadlineCause(parent, deadline, cause)
}

// wholeFailure reports whether res, a relay's result for a delivery with context dctx,
// failed the batch as a whole through the relay's fault: a plain error, not a
// PartialFailure, and not a cut the engine made.
func wholeFailure(dctx context.Context, res error) bool {
	var pf *PartialFailure
	return res != nil && !errors.As(res, &pf) && !engineCut(dctx)
}

// deliverPlain hands part to a Relay.
func (w *worker) deliverPlain(dctx context.Context, part []Envelope) tried {
	res := w.call(func() error { return w.ob.cfg.Relay.Deliver(dctx, part) })
	return tried{out: w.judge(dctx, part, res), whole: wholeFailure(dctx, res), stop: engineCut(dctx)}
}

// deliverPartTx hands part to a TxRelay in a transaction of its own, which commits what
// was delivered. The failures are judged, not recorded.
func (w *worker) deliverPartTx(dctx context.Context, txr TxRelay, part []Envelope) tried {
	out, res, called, err := w.deliverInTx(dctx, txr, part)
	cut := engineCut(dctx)
	switch {
	case err != nil && !called:
		return tried{err: err}
	case err == nil:
		return tried{out: out, whole: wholeFailure(dctx, res), stop: cut}
	}
	out = w.judge(dctx, part, res) // what a commit that went through made of it
	// The transaction failed. Its commit may have gone through all the same (the deadline
	// or a dropped connection ended it while it ran): the rows say.
	left, perr := w.stillReady(dctx, part)
	if perr != nil {
		// Nothing can be told: nothing is charged, and the part goes again in a later
		// batch, whose fetch reads what is left.
		w.log.Warn("outboxer: read the messages of a failed delivery", "err", perr)
		return tried{stop: true}
	}
	if len(left) < len(part) {
		return tried{out: out, stop: cut} // committed
	}
	// Not committed: nothing of part was delivered.
	var pf *PartialFailure
	if errors.As(res, &pf) && pf != nil && len(pf.Failed) > 0 {
		// The relay named what failed: that is charged, and what it delivered goes again
		// without it.
		if j := out; len(j.delivered) < len(part) {
			byID := make(map[int64]bool, len(j.delivered))
			for _, id := range j.delivered {
				byID[id] = true
			}
			var again []Envelope
			for i := range part {
				if byID[part[i].ID] {
					again = append(again, part[i])
				}
			}
			return tried{out: outcome{failed: j.failed, dead: j.dead}, again: again, stop: cut}
		}
	}
	// The relay reported the part delivered, and its transaction failed: the part
	// failed as a whole, with the transaction's error.
	return tried{out: w.judge(dctx, part, err), whole: !cut, stop: cut}
}

// stillReady returns the messages of part still ready in the table, read after the
// transaction that delivered them failed.
func (w *worker) stillReady(ctx context.Context, part []Envelope) (map[int64]bool, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	ids := make([]int64, len(part))
	for i := range part {
		ids[i] = part[i].ID
	}
	cond, args := w.ob.sql.IDList(ids)
	q := `SELECT id FROM ` + w.ob.sql.Messages + ` WHERE state = 0 AND ` + cond
	if w.o.kind == dialect.Postgres {
		q = strings.Replace(q, "?", "$1", 1) // the one placeholder of the ID list
	}
	left := make(map[int64]bool, len(part))
	err := queryRows(ctx, w.o.cfg.DB, q, args, func(scan func(...any) error) error {
		var id int64
		if err := scan(&id); err != nil {
			return err
		}
		left[id] = true
		return nil
	})
	return left, err
}
