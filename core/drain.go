package core

import (
	"context"
	"errors"
	"fmt"
)

// DrainResult counts what a Drain did.
type DrainResult struct {
	Delivered int // confirmed by the relay
	Failed    int // failed; pending again after their backoff
	Dead      int // failed for the last time
}

// Drain delivers, synchronously, every message of the outbox that is deliverable now,
// in order, through the outbox's relay, and returns what happened. It is for Manual mode
// (tests): ErrManualOnly otherwise.
//
// A message that fails during the call is not tried again by the same call, whatever its
// backoff, and holds back the rest of its group (everything, with OrderTotal); call
// Drain again to retry it once its backoff has passed.
func (o *Outboxer) Drain(ctx context.Context, outbox string) (DrainResult, error) {
	if !o.cfg.Manual {
		return DrainResult{}, ErrManualOnly
	}
	ob, err := o.outbox(outbox)
	if err != nil {
		return DrainResult{}, err
	}
	if err := o.checkPartitions(ctx, ob); err != nil {
		return DrainResult{}, err
	}
	if err := o.ensureLeases(ctx, ob, false, true); err != nil {
		return DrainResult{}, err
	}
	var res DrainResult
	owner := newOwner(o.cfg.Name)
	for p := range ob.cfg.Partitions {
		w := newWorker(o, ob, p, owner)
		w.once = true
		w.hooks = func(out outcome) {
			res.Delivered += len(out.delivered)
			res.Failed += len(out.failed)
			res.Dead += len(out.dead)
		}
		err := w.drain(ctx)
		w.release(context.WithoutCancel(ctx))
		if err != nil {
			return res, fmt.Errorf("outboxer: drain %q partition %d: %w", outbox, p, err)
		}
	}
	return res, nil
}

func (w *worker) drain(ctx context.Context) error {
	// A lease row locked by an administrative transaction (a discard, a retry) is waited
	// for: it is free a moment later.
	ok, err := w.takeLease(ctx, w.ob.sql.AwaitLease)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("the partition is owned by a running worker")
	}
	for {
		n, err := w.step(ctx, ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
	}
}
