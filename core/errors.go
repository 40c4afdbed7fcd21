package core

import (
	"errors"
	"fmt"

	"github.com/outboxer-go/outboxer/internal/sqlerr"
)

// Sentinel errors; every error the package returns wraps one of these where it applies,
// so callers can branch with errors.Is.
var (
	// ErrInvalidConfig: New was given a configuration it cannot run. The error is a *ConfigError.
	ErrInvalidConfig = errors.New("outboxer: invalid configuration")
	// ErrUnknownOutbox: the outbox named is not configured on this instance.
	ErrUnknownOutbox = errors.New("outboxer: unknown outbox")
	// ErrInvalidMessage: nil, or a message that cannot be encoded or has no outbox.
	ErrInvalidMessage = errors.New("outboxer: invalid message")
	// ErrPayloadTooLarge: the encoded message is larger than Config.MaxPayloadBytes.
	ErrPayloadTooLarge = errors.New("outboxer: payload too large")
	// ErrNotInTransaction: RequireTransaction is set and the handle is not a transaction.
	ErrNotInTransaction = errors.New("outboxer: publish outside a transaction")
	// ErrRepartitioned: Run (or Drain) was refused because its Partitions differs from the
	// count recorded in the database while messages are pending or relays with the
	// recorded count hold partitions (see Config.AllowRepartition). The message names both
	// counts.
	ErrRepartitioned = errors.New("outboxer: partitions changed on a live backlog")
	// ErrShapeMismatch: Run (or Drain) was refused because its Ordering differs from the
	// one the outbox's relays recorded in the database while messages are pending or
	// relays with the recorded one hold partitions (see Config.AllowRepartition). The
	// message names both.
	ErrShapeMismatch = errors.New("outboxer: configuration disagrees with the outbox's recorded shape")
	// ErrManualOnly: Drain was called on an instance that is not in manual mode.
	ErrManualOnly = errors.New("outboxer: Drain needs Manual mode")
	// ErrAlreadyRunning: Run was called on an instance that is running or has run.
	ErrAlreadyRunning = errors.New("outboxer: already running")
	// ErrInvalidExecutor: the handle given to Publish cannot be used (nil, or it cannot read rows).
	ErrInvalidExecutor = errors.New("outboxer: invalid executor")
	// ErrLeaseLost: a worker lost its partition to another owner; it stops delivering it.
	ErrLeaseLost = errors.New("outboxer: partition lease lost")
	// ErrNotMigrated: the outbox's table (or its PostgreSQL schema) does not exist in the
	// database: run Migrate, or apply MigrationSQL with your migration tool, first. On
	// PostgreSQL the failed statement aborts the caller's transaction.
	ErrNotMigrated = errors.New("outboxer: outbox table missing (not migrated)")
)

// isMissingTable reports whether err is a database's "no such table" (or, on
// PostgreSQL, "no such schema"), read from the driver's error (internal/sqlerr).
func isMissingTable(err error) bool { return sqlerr.Is(err, sqlerr.MissingTable) }

// isLockBusy reports whether err is a lock not granted in time: MySQL/MariaDB's lock
// wait timeout (error 1205), which a statement run with innodb_lock_wait_timeout 0
// returns at once when a row it needs is locked, or PostgreSQL's lock_not_available.
func isLockBusy(err error) bool { return sqlerr.Is(err, sqlerr.LockTimeout) }

// notMigrated wraps err, the failure of a statement on table, with ErrNotMigrated when
// it says the table is missing; otherwise it returns nil.
func notMigrated(table string, err error) error {
	if !isMissingTable(err) {
		return nil
	}
	return fmt.Errorf("%w: %s does not exist: run Migrate (or outboxer migrate up) before publishing: %w", ErrNotMigrated, table, err)
}

// ConfigError names the option New refused and why. It wraps ErrInvalidConfig.
type ConfigError struct {
	Field  string // e.g. `Outboxes["orders"].Partitions`
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("outboxer: invalid configuration: %s: %s", e.Field, e.Reason)
}

// Unwrap returns ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }
