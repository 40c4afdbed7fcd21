package core

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/outboxer-go/outboxer/core/internal/dialect"
	"github.com/outboxer-go/outboxer/internal/dbtime"
)

// Counts is the number of messages of an outbox by state.
type Counts struct {
	Pending   int64 // the backlog, including messages waiting for a retry
	Delivered int64 // only with KeepFor retention
	Dead      int64
}

// Counts returns the number of messages of an outbox by state.
func (o *Outboxer) Counts(ctx context.Context, outbox string) (Counts, error) {
	ob, err := o.outbox(outbox)
	if err != nil {
		return Counts{}, err
	}
	var c Counts
	err = o.queryCommitted(ctx, ob.sql.Counts, []any{outbox}, func(scan func(...any) error) error {
		var state int
		var n int64
		if err := scan(&state, &n); err != nil {
			return err
		}
		switch storedState(state) {
		case Pending:
			c.Pending += n
		case Delivered:
			c.Delivered = n
		case Dead:
			c.Dead = n
		}
		return nil
	})
	if err != nil {
		return Counts{}, fmt.Errorf("outboxer: counts of %q: %w", outbox, err)
	}
	return c, nil
}

// ListPending lists pending messages of an outbox, oldest first, at most limit (100 when
// limit <= 0). Messages with Attempts > 0 failed and wait for a retry; with ordering on,
// they are what holds their group back.
func (o *Outboxer) ListPending(ctx context.Context, outbox string, limit int) ([]Envelope, error) {
	return o.list(ctx, outbox, limit, func(ob *box) string { return ob.sql.ListPending })
}

// ListDead lists dead messages of an outbox, oldest first, at most limit (100 when
// limit <= 0). LastError holds the reason of the final failure.
func (o *Outboxer) ListDead(ctx context.Context, outbox string, limit int) ([]Envelope, error) {
	return o.list(ctx, outbox, limit, func(ob *box) string { return ob.sql.ListDead })
}

func (o *Outboxer) list(ctx context.Context, outbox string, limit int, query func(*box) string) ([]Envelope, error) {
	ob, err := o.outbox(outbox)
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = DefaultListLimit
	}
	var envs []Envelope
	err = o.queryCommitted(ctx, query(ob), []any{outbox, limit}, func(scan func(...any) error) error {
		e, err := scanEnvelope(scan)
		if err != nil {
			return err
		}
		envs = append(envs, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outboxer: list %q: %w", outbox, err)
	}
	return envs, nil
}

// scanEnvelope reads the columns of a stored envelope (the lists of the admin operations).
func scanEnvelope(scan func(...any) error) (Envelope, error) {
	var (
		e         Envelope
		headers   *string
		lastError *string
		state     int
		created   dbtime.Time
		available dbtime.Time
	)
	if err := scan(&e.ID, &e.Outbox, &e.Type, &e.GroupKey, &e.Partition, &e.Payload, &headers, &state,
		&e.Attempts, &lastError, &created, &available); err != nil {
		return Envelope{}, err
	}
	if err := finishEnvelope(&e, headers, lastError); err != nil {
		// Headers the engine cannot read (written by another program) do not hide the
		// message from the operator: it is listed without them, the reason in LastError.
		var he *headersError
		if !errors.As(err, &he) {
			return Envelope{}, err
		}
		if e.LastError == "" {
			e.LastError = he.Error()
		}
	}
	e.State = storedState(state)
	e.CreatedAt, e.AvailableAt = created.Time, available.Time
	return e, nil
}

// storedState is the State of a value of the state column: the engine stores pending
// messages as ready, waiting or held (StoredPendingStates).
func storedState(v int) State {
	switch v {
	case dialect.Ready, dialect.Waiting, dialect.Held:
		return Pending
	}
	return State(v)
}

// finishEnvelope fills in what the nullable columns say.
func finishEnvelope(e *Envelope, headers, lastError *string) error {
	if lastError != nil {
		e.LastError = *lastError
	}
	if e.Payload == nil {
		e.Payload = []byte{}
	}
	if headers != nil && *headers != "" {
		var h map[string]string
		if err := json.Unmarshal([]byte(*headers), &h); err != nil {
			return &headersError{id: e.ID, err: err}
		}
		e.Headers = h
	}
	return nil
}

// headersError says the headers column of a message is not a JSON object of strings
// (another program wrote it). The rest of the envelope is read.
type headersError struct {
	id  int64
	err error
}

func (e *headersError) Error() string {
	return fmt.Sprintf("message %d: unreadable headers (not a JSON object of strings): %v", e.id, e.err)
}

func (e *headersError) Unwrap() error { return e.err }

// Discard permanently deletes messages of an outbox by ID, whatever their state, and
// returns how many it deleted. It is how a poison message that blocks its group (with
// MaxAttempts 0) is skipped: find it with ListPending, then discard it.
func (o *Outboxer) Discard(ctx context.Context, outbox string, ids ...int64) (int64, error) {
	ob, err := o.outbox(outbox)
	if err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	n, err := o.discard(ctx, ob, ids)
	if err != nil {
		return 0, fmt.Errorf("outboxer: discard from %q: %w", outbox, err)
	}
	ob.signalAll(wakeNow)
	return n, nil
}

// discard deletes messages by ID and, in the same transaction, releases the held
// messages of the groups of those that were pending: nothing else would. That includes a
// retry the relay has in hand (ready again, no longer waiting): its failure, recorded
// after, finds no row and releases nothing. The
// transaction first locks the outbox's lease rows, which every worker's holding and
// confirming transaction locks first too, so a worker cannot hold a message behind one
// deleted meanwhile.
func (o *Outboxer) discard(ctx context.Context, ob *box, ids []int64) (int64, error) {
	s := ob.sql
	tx, err := o.cfg.DB.BeginTx(ctx, o.txOptions())
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	if o.kind != dialect.SQLite { // one writer: nothing to lock
		if err := queryRows(ctx, tx, s.LockLeases, []any{ob.name}, func(func(...any) error) error { return nil }); err != nil {
			return 0, fmt.Errorf("lock leases: %w", err)
		}
	}
	// The ordering the relays recorded, not this instance's: an admin instance (the
	// dashboard's, the CLI's) is built with default options, and releasing only the
	// poison's own group in an outbox ordered in total would leave its partition held.
	ordering, err := recordedOrdering(ctx, tx, ob)
	if err != nil {
		return 0, err
	}
	release := map[int][]string{}
	if ordering != OrderNone {
		q, args := s.PendingGroups(ob.name, ids)
		err = queryRows(ctx, tx, q, args, func(scan func(...any) error) error {
			var part int
			var group string
			if err := scan(&part, &group); err != nil {
				return err
			}
			if ordering == OrderTotal {
				release[part] = nil
			} else if group != "" {
				release[part] = append(release[part], group)
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
	}
	q, args := s.DeleteIDs(ob.name, ids)
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	for part, groups := range release {
		if groups == nil && ordering != OrderTotal {
			continue
		}
		q, args := s.Release(ob.name, part, groups)
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return 0, fmt.Errorf("release held messages: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return n, nil
}

// recordedOrdering is the ordering the relays of ob recorded, read through tx, or this
// instance's own when no relay has run yet.
func recordedOrdering(ctx context.Context, tx *sql.Tx, ob *box) (Ordering, error) {
	var (
		known int
		text  sql.NullString
	)
	if err := tx.QueryRowContext(ctx, ob.sql.ReadShape, ob.name, ob.name).Scan(&known, &text); err != nil {
		return 0, fmt.Errorf("read the shape: %w", err)
	}
	if sh, ok := parseShape(text.String); ok && text.Valid {
		return sh.ordering, nil
	}
	return ob.cfg.Ordering, nil
}

// RetryDead puts dead messages of an outbox back for delivery, with their attempts reset,
// and returns how many it revived: those with the given IDs, or every dead message when
// none are given. They keep their ID, so they rejoin their group at their old place (later
// messages of the group may have been delivered already), in the partition their group
// has among the partition count the relays recorded, which may differ from the one they
// died in when the count changed since.
func (o *Outboxer) RetryDead(ctx context.Context, outbox string, ids ...int64) (int64, error) {
	ob, err := o.outbox(outbox)
	if err != nil {
		return 0, err
	}
	n, err := o.retryDead(ctx, ob, ids)
	if err != nil {
		return 0, fmt.Errorf("outboxer: retry dead of %q: %w", outbox, err)
	}
	ob.signalAll(wakeNow)
	return n, nil
}

// Pause stops the delivery of an outbox on every node sharing its table, until Resume.
// Workers notice within a quarter of Config.LeaseDuration; on this instance at once: a
// batch in flight finishes and no other starts. Publishing goes on.
func (o *Outboxer) Pause(ctx context.Context, outbox string) error {
	return o.setPaused(ctx, outbox, true)
}

// Resume restarts the delivery of a paused outbox on every node.
func (o *Outboxer) Resume(ctx context.Context, outbox string) error {
	return o.setPaused(ctx, outbox, false)
}

func (o *Outboxer) setPaused(ctx context.Context, outbox string, paused bool) error {
	ob, err := o.outbox(outbox)
	if err != nil {
		return err
	}
	if err := o.ensureLeases(ctx, ob, paused, false); err != nil {
		return err
	}
	q := ob.sql.Resume
	if paused {
		q = ob.sql.Pause
	}
	if _, err := o.cfg.DB.ExecContext(ctx, q, outbox); err != nil {
		return fmt.Errorf("outboxer: pause %q: %w", outbox, err)
	}
	ob.pauses.Add(1)
	ob.signalAll(wakeRecheck)
	return nil
}

// ensureLeases creates the lease rows of the outbox's partitions that do not exist yet.
// New rows are paused when asked, or when the outbox is paused already (paused by an
// instance that knew fewer partitions).
//
// Rows made for a run (forRun) record the partition count, which the next run checks;
// rows made by an admin operation do not, until a run claims them.
func (o *Outboxer) ensureLeases(ctx context.Context, ob *box, paused, forRun bool) error {
	if !paused {
		var n int
		if err := o.cfg.DB.QueryRowContext(ctx, ob.sql.AnyPaused, ob.name).Scan(&n); err != nil {
			return fmt.Errorf("outboxer: read pause of %q: %w", ob.name, err)
		}
		paused = n > 0
	}
	token := -1
	if forRun {
		token = 0
	}
	// One transaction: publishers read the partition count from these rows, and must
	// never see some of them only.
	tx, err := o.cfg.DB.BeginTx(ctx, o.txOptions())
	if err != nil {
		return fmt.Errorf("outboxer: create leases of %q: %w", ob.name, err)
	}
	defer tx.Rollback()
	for p := range ob.cfg.Partitions {
		if _, err := tx.ExecContext(ctx, ob.sql.EnsureLease, ob.name, p, token, paused); err != nil {
			return fmt.Errorf("outboxer: create lease of %q partition %d: %w", ob.name, p, err)
		}
	}
	if forRun {
		if _, err := tx.ExecContext(ctx, ob.sql.ClaimLeases, ob.name, ob.cfg.Partitions); err != nil {
			return fmt.Errorf("outboxer: claim leases of %q: %w", ob.name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outboxer: create leases of %q: %w", ob.name, err)
	}
	return nil
}

// Status returns the health of each partition of one outbox, in partition order: its
// backlog, its lag, and who holds its lease. It is Health for one outbox, read for its
// partitions.
func (o *Outboxer) Status(ctx context.Context, outbox string) ([]PartitionHealth, error) {
	h, err := o.Health(ctx, outbox)
	if err != nil {
		return nil, err
	}
	return h.Outboxes[0].Partitions, nil
}
