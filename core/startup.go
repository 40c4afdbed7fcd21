package core

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// startUpBackoff spaces the tries of Run's start-up: 100 ms, doubling up to 30 s, with jitter.
var startUpBackoff = Backoff{Min: 100 * time.Millisecond, Max: 30 * time.Second}

// startUp prepares the tables and starts the relays, trying again after the failures
// waiting can fix (see Run) until ctx is done.
//
// A Starter that panics: the panic goes on up to Run's caller unchanged, once the relays
// started so far are closed and the instance no longer counts as running, so that a
// caller that recovers it (a supervisor) may call Run again.
func (o *Outboxer) startUp(ctx context.Context, started map[Relay]bool) error {
	returned := false
	defer func() {
		if !returned {
			o.closeRelays(started)
			o.running.Store(false)
		}
	}()
	err := o.tryStartUp(ctx, started)
	returned = true
	return err
}

// tryStartUp is startUp's loop.
func (o *Outboxer) tryStartUp(ctx context.Context, started map[Relay]bool) error {
	for try := 1; ; try++ {
		err := o.prepareRun(ctx)
		if err == nil {
			err = o.startRelays(ctx, started)
		}
		if err == nil {
			if try > 1 {
				o.cfg.Logger.Info("outboxer: started", "outboxer", o.cfg.Name, "tries", try)
			}
			return nil
		}
		if ctx.Err() != nil {
			return stoppedError(ctx, err)
		}
		if !retryStartUp(err) {
			o.cfg.Logger.Error("outboxer: cannot start; not retrying", "outboxer", o.cfg.Name, "err", err)
			return err
		}
		wait := startUpBackoff.Delay(try)
		o.cfg.Logger.Error("outboxer: cannot start; retrying", "outboxer", o.cfg.Name, "err", err, "try", try, "retry_in", wait)
		if !sleep(ctx, wait) {
			return stoppedError(ctx, err)
		}
	}
}

// retryStartUp reports whether a start-up failure may go away by itself: anything but a
// refusal of the configuration or an error marked Permanent.
func retryStartUp(err error) bool {
	for _, fatal := range []error{ErrRepartitioned, ErrShapeMismatch, ErrInvalidConfig, ErrAlreadyRunning, ErrPermanent} {
		if errors.Is(err, fatal) {
			return false
		}
	}
	return true
}

// startUpError makes a start-up failure that says the tables are missing match
// ErrNotMigrated, naming the table.
func startUpError(ob *box, err error) error {
	if errors.Is(err, ErrNotMigrated) || !isMissingTable(err) {
		return err
	}
	return fmt.Errorf("%w: %s does not exist yet: run Migrate (or outboxer migrate up): %w", ErrNotMigrated, ob.sql.Messages, err)
}

// stoppedError is Run's error when ctx ended before start-up succeeded: it matches ctx's
// error and, when ctx was ended with one, its cause (context.WithCancelCause), and wraps
// last, the last start-up failure.
func stoppedError(ctx context.Context, last error) error {
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
		return fmt.Errorf("outboxer: stopped before start-up succeeded: %w: %w (last error: %w)", ctx.Err(), cause, last)
	}
	return fmt.Errorf("outboxer: stopped before start-up succeeded: %w (last error: %w)", ctx.Err(), last)
}
