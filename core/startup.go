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
func (o *Outboxer) startUp(ctx context.Context, started map[Relay]bool) error {
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
			return fmt.Errorf("outboxer: stopped before start-up succeeded: %w (last error: %w)", context.Cause(ctx), err)
		}
		if !retryStartUp(err) {
			o.cfg.Logger.Error("outboxer: cannot start; not retrying", "outboxer", o.cfg.Name, "err", err)
			return err
		}
		wait := startUpBackoff.Delay(try)
		o.cfg.Logger.Error("outboxer: cannot start; retrying", "outboxer", o.cfg.Name, "err", err, "try", try, "retry_in", wait)
		if !sleep(ctx, wait) {
			return fmt.Errorf("outboxer: stopped before start-up succeeded: %w (last error: %w)", context.Cause(ctx), err)
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
