package core

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"time"

	"github.com/outboxer-go/outboxer/core/internal/dialect"
)

// worker delivers one partition of one outbox. At most one worker in the whole cluster
// holds a partition's lease; only the holder fetches, and every confirmation is fenced
// by the lease token in the same transaction.
type worker struct {
	o     *Outboxer
	ob    *box
	part  int
	owner string
	log   *slog.Logger

	// The lease.
	held      bool
	token     int64
	paused    bool
	renewedAt time.Time // local clock, taken before the statement that renewed
	until     time.Time // local clock: the lease is trusted until then

	// blocked holds, per group, the ID from which the group must not be fetched (its
	// message waits for a retry or is scheduled), and when that is expected to end.
	blocked   map[string]block
	checkedAt time.Time // last time blocked was checked against the table
	forever   bool      // Drain: failed messages stay blocked for the rest of the call
	skip      []int64   // Drain: unordered messages that failed during the call
	relayName string
	// unreadable holds the messages of the last fetch whose headers cannot be read.
	unreadable []failure
	// pauses is the box's count of Pause and Resume calls when the flag was last read.
	pauses uint64
	// hooks, when set, sees every confirmed outcome (Drain counts with it).
	hooks func(outcome)
}

type block struct {
	from  int64
	until time.Time // local clock
}

// totalGroup stands for the whole partition in OrderTotal.
const totalGroup = "\x00total"

func newWorker(o *Outboxer, ob *box, part int, owner string) *worker {
	return &worker{
		o: o, ob: ob, part: part, owner: owner,
		log:       o.cfg.Logger.With("outboxer", o.cfg.Name, "outbox", ob.name, "partition", part),
		blocked:   map[string]block{},
		relayName: relayName(ob.cfg.Relay),
	}
}

func relayName(r Relay) string {
	if r == nil {
		return ""
	}
	// A wrapper (tracing, metrics) names the relay it wraps.
	for range 8 {
		w, ok := r.(interface{ Unwrap() Relay })
		if !ok || w.Unwrap() == nil {
			break
		}
		r = w.Unwrap()
	}
	return reflect.TypeOf(r).String()
}

// newOwner names a worker for the lease table: host, process and a random suffix, so two
// runs never share a name.
func newOwner() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b))
}

func (w *worker) lease() time.Duration { return w.o.cfg.LeaseDuration }

// acquire tries to take the partition's lease. It reports whether it holds it.
func (w *worker) acquire(ctx context.Context) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	// Taking a lease is not cut short halfway: the worker must know whether it holds it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	s, db := w.ob.sql, w.o.cfg.DB
	start := time.Now()
	res, err := db.ExecContext(ctx, s.AcquireLease, w.owner, w.lease().Microseconds(), w.ob.name, w.part)
	if err != nil {
		return false, fmt.Errorf("acquire lease: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return false, nil
	}
	var paused bool
	if err := db.QueryRowContext(ctx, s.ReadLease, w.ob.name, w.part, w.owner).Scan(&w.token, &paused); err != nil {
		return false, fmt.Errorf("read lease: %w", err)
	}
	w.held, w.paused = true, paused
	w.renewedAt = start
	w.trust(start)
	// A new owner knows nothing of the blocked groups; the first fetches find them.
	clear(w.blocked)
	w.log.Debug("outboxer: partition acquired", "token", w.token)
	return true, nil
}

// trust records an extension of the lease that started at start: the lease is trusted
// for less than its duration, measured from before the statement ran. (Confirmations
// extend it too; renew, which also reads the paused flag, still runs every quarter lease.)
func (w *worker) trust(start time.Time) {
	w.until = start.Add(w.lease() - w.lease()/5)
}

// renew extends the lease and reads the paused flag. A lost lease is ErrLeaseLost.
func (w *worker) renew(ctx context.Context) error {
	s, db := w.ob.sql, w.o.cfg.DB
	start := time.Now()
	res, err := db.ExecContext(ctx, s.RenewLease, w.lease().Microseconds(), w.ob.name, w.part, w.token)
	if err != nil {
		return fmt.Errorf("renew lease: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		w.lost()
		return ErrLeaseLost
	}
	w.renewedAt = start
	w.trust(start)
	var token int64
	if err := db.QueryRowContext(ctx, s.ReadLease, w.ob.name, w.part, w.owner).Scan(&token, &w.paused); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			w.lost()
			return ErrLeaseLost
		}
		return fmt.Errorf("read lease: %w", err)
	}
	return nil
}

func (w *worker) lost() {
	if w.held {
		w.log.Warn("outboxer: partition lease lost to another owner", "token", w.token)
	}
	w.held = false
}

// release gives the lease up so another node can take the partition at once.
// It matches the lease by owner, not by the token this worker knows: a statement that
// took the lease just as the context ended may have gone through unseen.
func (w *worker) release(ctx context.Context) {
	w.held = false
	if _, err := w.o.cfg.DB.ExecContext(ctx, w.ob.sql.ReleaseLease, w.ob.name, w.part, w.owner); err != nil {
		w.log.Warn("outboxer: release lease", "err", err)
	}
}

// due reports whether the lease should be renewed before the next batch.
func (w *worker) due() bool { return time.Since(w.renewedAt) >= w.lease()/4 }

// group is the key that orders m in this outbox's ordering: "" for unordered.
func (w *worker) group(e *Envelope) string {
	switch w.ob.cfg.Ordering {
	case OrderTotal:
		return totalGroup
	case OrderNone:
		return ""
	}
	return e.GroupKey
}

// exclusions returns the blocked groups to leave out of the next fetch, dropping those
// whose wait is over.
func (w *worker) exclusions(now time.Time) []dialect.Exclusion {
	var out []dialect.Exclusion
	for g, b := range w.blocked {
		if !w.forever && !now.Before(b.until) {
			delete(w.blocked, g)
			continue
		}
		if g == totalGroup {
			g = ""
		}
		out = append(out, dialect.Exclusion{Group: g, From: b.from})
	}
	return out
}

// recheck drops blocks whose message is no longer pending and waiting (discarded,
// delivered elsewhere, revived): the table is the truth, memory only a shortcut.
func (w *worker) recheck(ctx context.Context) error {
	w.checkedAt = time.Now()
	if len(w.blocked) == 0 || w.forever {
		return nil
	}
	ids := make([]int64, 0, len(w.blocked))
	for _, b := range w.blocked {
		ids = append(ids, b.from)
	}
	q, args := w.ob.sql.StillBlocking(ids)
	still := map[int64]bool{}
	err := queryRows(ctx, w.o.cfg.DB, q, args, func(scan func(...any) error) error {
		var id int64
		if err := scan(&id); err != nil {
			return err
		}
		still[id] = true
		return nil
	})
	if err != nil {
		return fmt.Errorf("recheck blocked groups: %w", err)
	}
	for g, b := range w.blocked {
		if !still[b.from] {
			delete(w.blocked, g)
		}
	}
	return nil
}

// fetch reads the next deliverable messages of the partition in ID order. Rows not yet
// available block their group from their ID on.
func (w *worker) fetch(ctx context.Context) (batch []Envelope, fetched int, err error) {
	cfg := w.ob.cfg
	now := time.Now()
	q, args := w.ob.sql.Fetch(w.ob.name, w.part, cfg.BatchSize, w.mode(), w.exclusions(now), w.skip)
	var exec Executor = w.o.cfg.DB
	if w.o.strictIsolation(ctx) {
		// The pool reads at another level: read only what is committed, whatever it says.
		tx, err := w.o.cfg.DB.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted, ReadOnly: true})
		if err != nil {
			return nil, 0, err
		}
		defer tx.Rollback()
		exec = tx
	}
	blockedHere := map[string]bool{}
	err = queryRows(ctx, exec, q, args, func(scan func(...any) error) error {
		var (
			ready bool
			dbNow dbTime
		)
		e, err := w.scanFetched(scan, &ready, &dbNow)
		var he *headersError
		unreadable := errors.As(err, &he)
		if err != nil && !unreadable {
			return err
		}
		fetched++
		g := w.group(&e)
		if g != "" && blockedHere[g] {
			return nil
		}
		if unreadable {
			// It goes dead alone, with the reason; its group waits for that, the
			// partition does not.
			w.unreadable = append(w.unreadable, failure{env: &e, err: Permanent(he)})
			if g != "" {
				blockedHere[g] = true
			}
			return nil
		}
		if !ready {
			if g == "" {
				return nil // unordered and not due yet: nothing waits for it
			}
			// Waiting for a retry or scheduled: its group waits too.
			blockedHere[g] = true
			w.blocked[g] = block{from: e.ID, until: now.Add(e.AvailableAt.Sub(dbNow.Time))}
			return nil
		}
		batch = append(batch, e)
		return nil
	})
	return batch, fetched, err
}

// scanFetched reads a row of the fetch query: only the columns the worker does not know
// already (the outbox, the partition and the state are its own), as scanning is most of
// a fetch's cost in Go.
func (w *worker) scanFetched(scan func(...any) error, ready *bool, dbNow *dbTime) (Envelope, error) {
	var (
		e         Envelope
		headers   *string
		lastError *string
		created   dbTime
		available dbTime
	)
	if err := scan(&e.ID, &e.Type, &e.GroupKey, &e.Payload, &headers, &e.Attempts, &lastError, &created, &available, ready, dbNow); err != nil {
		return Envelope{}, err
	}
	e.Outbox, e.Partition, e.State = w.ob.name, w.part, Pending
	err := finishEnvelope(&e, headers, lastError) // a *headersError still reads the rest
	e.CreatedAt, e.AvailableAt = created.Time, available.Time
	return e, err
}

func (w *worker) mode() dialect.Mode {
	switch w.ob.cfg.Ordering {
	case OrderTotal:
		return dialect.Total
	case OrderNone:
		return dialect.Unordered
	}
	return dialect.Grouped
}

// outcome is what a batch came to.
type outcome struct {
	delivered []int64
	failed    []failure
	dead      []failure
	held      int // not delivered because an earlier message of their group failed
}

type failure struct {
	env   *Envelope
	err   error
	delay time.Duration
}

// judge turns the relay's result into an outcome, walking the batch in order. ctx is the
// delivery's context: when the engine itself ended it (shutdown timeout, lease deadline),
// a failure is not the relay's and counts no attempt (unless it is permanent).
func (w *worker) judge(ctx context.Context, batch []Envelope, err error) outcome {
	var failed map[int64]error
	var pf *PartialFailure
	switch {
	case err == nil:
	case errors.As(err, &pf):
		// A typed nil *PartialFailure names no failed message: the batch was delivered.
		if pf != nil {
			failed = pf.Failed
		}
	default:
		failed = make(map[int64]error, len(batch))
		for _, e := range batch {
			failed[e.ID] = err
		}
	}
	cfg := w.ob.cfg
	cut := engineCut(ctx)
	var out outcome
	stopped := map[string]bool{}
	for i := range batch {
		e := &batch[i]
		g := w.group(e)
		if g != "" && stopped[g] {
			out.held++
			continue
		}
		ferr, bad := failed[e.ID]
		if !bad {
			out.delivered = append(out.delivered, e.ID)
			continue
		}
		if ferr == nil {
			ferr = errors.New("failed (no reason given)")
		}
		if errors.Is(ferr, ErrHeldBack) || (cut && !errors.Is(ferr, ErrPermanent)) {
			out.held++
			if g != "" {
				stopped[g] = true
			}
			continue
		}
		attempts := e.Attempts + 1
		// Later messages of the group in this batch are not counted delivered, even when
		// this one is now dead: they go again in the next batch, in order.
		if g != "" {
			stopped[g] = true
		}
		if errors.Is(ferr, ErrPermanent) || (cfg.MaxAttempts > 0 && attempts >= cfg.MaxAttempts) {
			out.dead = append(out.dead, failure{env: e, err: ferr})
			continue
		}
		out.failed = append(out.failed, failure{env: e, err: ferr, delay: cfg.Backoff.Delay(attempts)})
	}
	return out
}

// errShutdown and errLeaseEnding are the causes of the cancellations the engine makes
// itself: a delivery they cut short failed through no fault of the message.
var (
	errShutdown    = errors.New("outboxer: shutdown timeout passed")
	errLeaseEnding = errors.New("outboxer: the partition's lease may run out")
)

// engineCut reports whether ctx ended for a reason of the engine's own.
func engineCut(ctx context.Context) bool {
	if ctx == nil || ctx.Err() == nil {
		return false
	}
	c := context.Cause(ctx)
	return errors.Is(c, errShutdown) || errors.Is(c, errLeaseEnding)
}

// errString bounds what is kept of an error.
func errString(err error) string {
	s := err.Error()
	if len(s) > 2000 {
		s = s[:2000]
	}
	return s
}

// confirm records an outcome in one transaction that first checks (and extends) the lease:
// a worker that lost its partition changes nothing. With a TxRelay, deliver runs inside
// that transaction, after the check.
//
// A confirmation that fails for a passing reason (a deadlock with a publisher on MySQL, a
// dropped connection) is tried again a few times: giving up means delivering the batch again.
func (w *worker) confirm(ctx context.Context, deliverTx func(*sql.Tx) outcome) (out outcome, err error) {
	err = w.retry(ctx, func() error {
		out, err = w.confirmOnce(ctx, deliverTx)
		return err
	})
	return out, err
}

// retry runs confirm up to three times while it fails for a reason other than a lost lease.
func (w *worker) retry(ctx context.Context, confirm func() error) error {
	var err error
	for attempt := range 3 {
		err = confirm()
		if err == nil || errors.Is(err, ErrLeaseLost) || ctx.Err() != nil {
			return err
		}
		w.log.Debug("outboxer: confirm failed, trying again", "attempt", attempt+1, "err", err)
		if !sleep(ctx, time.Duration(attempt+1)*10*time.Millisecond) {
			break
		}
	}
	return err
}

// confirmAll records a batch that was delivered whole, on PostgreSQL, in one statement
// that checks and extends the lease and removes (or marks) the messages only if it holds:
// one round trip instead of a transaction's four.
func (w *worker) confirmAll(ctx context.Context, ids []int64) error {
	start := time.Now()
	q, args := w.ob.sql.ConfirmAll(ids, w.ob.cfg.Retention.keep > 0)
	args = append([]any{w.lease().Microseconds(), w.ob.name, w.part, w.token}, args...)
	var held, done int64
	if err := w.o.cfg.DB.QueryRowContext(ctx, q, args...).Scan(&held, &done); err != nil {
		return fmt.Errorf("confirm delivered: %w", err)
	}
	if held != 1 {
		w.lost()
		return ErrLeaseLost
	}
	w.trust(start)
	return nil
}

func (w *worker) confirmOnce(ctx context.Context, deliverTx func(*sql.Tx) outcome) (outcome, error) {
	s := w.ob.sql
	start := time.Now()
	tx, err := w.o.cfg.DB.BeginTx(ctx, w.o.txOptions())
	if err != nil {
		return outcome{}, err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, s.FenceLease, w.lease().Microseconds(), w.ob.name, w.part, w.token)
	if err != nil {
		return outcome{}, fmt.Errorf("check lease: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		w.lost()
		return outcome{}, ErrLeaseLost
	}
	out := deliverTx(tx)
	if len(out.delivered) > 0 {
		var q string
		var args []any
		if w.ob.cfg.Retention.keep > 0 {
			q, args = s.MarkDelivered(out.delivered)
		} else {
			q, args = s.DeletePending(out.delivered)
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return outcome{}, fmt.Errorf("confirm delivered: %w", err)
		}
	}
	for _, f := range out.failed {
		if _, err := tx.ExecContext(ctx, s.FailMessage, errString(f.err), f.delay.Microseconds(), f.env.ID, f.env.Attempts); err != nil {
			return outcome{}, fmt.Errorf("record failure of %d: %w", f.env.ID, err)
		}
	}
	for _, f := range out.dead {
		if _, err := tx.ExecContext(ctx, s.KillMessage, errString(f.err), f.env.ID, f.env.Attempts); err != nil {
			return outcome{}, fmt.Errorf("record dead %d: %w", f.env.ID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return outcome{}, fmt.Errorf("commit: %w", err)
	}
	w.trust(start)
	return out, nil
}

// deliverTx hands a batch to a TxRelay. The delivery and the removal of the delivered
// rows commit together, in one transaction under the delivery's deadline. The failures
// are recorded after it, in a transaction of their own that the deadline cannot end and
// that a statement which aborted the delivery's transaction cannot spoil: attempts count,
// MaxAttempts and Permanent apply, and a failing batch does not go again at once.
func (w *worker) deliverTx(ctx, dctx context.Context, txr TxRelay, batch []Envelope) (outcome, error) {
	out, called, err := w.deliverInTx(dctx, txr, batch)
	if err != nil && !called {
		// The relay was not called (lease lost, database away): no attempt to record.
		return outcome{}, err
	}
	if err != nil {
		// Rolled back (or its commit is in doubt, and then the failure updates below find
		// the rows gone): nothing counts as delivered.
		out = w.judge(dctx, batch, err)
	}
	if len(out.failed) == 0 && len(out.dead) == 0 {
		return out, nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	record := outcome{failed: out.failed, dead: out.dead}
	if _, err := w.confirm(cctx, func(*sql.Tx) outcome { return record }); err != nil {
		return outcome{}, fmt.Errorf("record failures: %w", err)
	}
	return out, nil
}

// deliverInTx runs DeliverTx in a transaction fenced by the lease and commits it with
// the delivered rows removed; it rolls back when nothing was delivered. called says
// whether the relay was called.
func (w *worker) deliverInTx(ctx context.Context, txr TxRelay, batch []Envelope) (out outcome, called bool, err error) {
	s := w.ob.sql
	start := time.Now()
	tx, err := w.o.cfg.DB.BeginTx(ctx, w.o.txOptions())
	if err != nil {
		return outcome{}, false, fmt.Errorf("deliver in transaction: %w", err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, s.FenceLease, w.lease().Microseconds(), w.ob.name, w.part, w.token)
	if err != nil {
		return outcome{}, false, fmt.Errorf("check lease: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		w.lost()
		return outcome{}, false, ErrLeaseLost
	}
	out = w.judge(ctx, batch, w.call(func() error { return txr.DeliverTx(ctx, tx, batch) }))
	if len(out.delivered) == 0 {
		return out, true, nil
	}
	var q string
	var args []any
	if w.ob.cfg.Retention.keep > 0 {
		q, args = s.MarkDelivered(out.delivered)
	} else {
		q, args = s.DeletePending(out.delivered)
	}
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return outcome{}, true, fmt.Errorf("confirm delivered: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return outcome{}, true, fmt.Errorf("commit delivery: %w", err)
	}
	w.trust(start)
	return out, true, nil
}

// step fetches one batch, hands it to the relay and confirms it. It reports how many
// messages it fetched (0: nothing to do now).
func (w *worker) step(ctx, hard context.Context) (int, error) {
	if w.due() {
		if err := w.renew(ctx); err != nil {
			return 0, err
		}
	}
	if time.Since(w.checkedAt) > w.ob.cfg.PollInterval*5 {
		if err := w.recheck(ctx); err != nil {
			return 0, err
		}
	}
	if p := w.ob.pauses.Load(); p != w.pauses {
		// Pause or Resume was called on this instance: read the flag before any batch.
		if err := w.renew(ctx); err != nil {
			return 0, err
		}
		w.pauses = p
	}
	if w.paused {
		return 0, nil
	}
	w.unreadable = w.unreadable[:0]
	batch, fetched, err := w.fetch(ctx)
	if err != nil {
		return 0, fmt.Errorf("fetch: %w", err)
	}
	if len(w.unreadable) > 0 {
		if err := w.killUnreadable(ctx); err != nil {
			return 0, err
		}
	}
	if len(batch) == 0 {
		// Rows that were read but not deliverable blocked their groups; look again at once.
		return fetched, nil
	}
	hooks, name := &w.o.cfg.Hooks, w.o.cfg.Name
	ev := BatchEvent{Name: name, Outbox: w.ob.name, Partition: w.part, Relay: w.relayName, Count: len(batch), Fetched: fetched}
	if hooks.OnBatchStart != nil {
		hooks.OnBatchStart(ev)
	}
	began := time.Now()

	// The delivery ends before the lease could run out, and at the delivery timeout.
	deadline := began.Add(w.ob.cfg.DeliveryTimeout)
	if w.until.Before(deadline) {
		deadline = w.until
	}
	bctx := hard
	if hooks.OnBatchContext != nil {
		if c := hooks.OnBatchContext(hard, ev); c != nil {
			bctx = c
		}
	}
	var cause error // the delivery timeout is the relay's: a failed attempt
	if deadline.Equal(w.until) {
		cause = errLeaseEnding
	}
	dctx, cancel := context.WithDeadlineCause(bctx, deadline, cause)
	defer cancel()

	var out outcome
	if txr, ok := w.ob.cfg.Relay.(TxRelay); ok {
		out, err = w.deliverTx(ctx, dctx, txr, batch)
	} else {
		result := w.call(func() error { return w.ob.cfg.Relay.Deliver(dctx, batch) })
		out = w.judge(dctx, batch, result)
		// Confirm even after a cancelled delivery: what was delivered must be recorded.
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer ccancel()
		if w.o.kind == dialect.Postgres && !w.o.strictIsolation(cctx) && len(out.failed) == 0 && len(out.dead) == 0 && len(out.delivered) > 0 {
			err = w.retry(cctx, func() error { return w.confirmAll(cctx, out.delivered) })
		} else {
			out, err = w.confirm(cctx, func(*sql.Tx) outcome { return out })
		}
	}
	ev.Duration = time.Since(began)
	if err != nil {
		ev.Err = err
		if hooks.OnBatchException != nil {
			hooks.OnBatchException(ev)
		}
		return fetched, fmt.Errorf("confirm batch: %w", err)
	}
	now := time.Now()
	for _, f := range out.failed {
		g := w.group(f.env)
		switch {
		case g != "":
			w.blocked[g] = block{from: f.env.ID, until: now.Add(f.delay)}
		case w.forever:
			w.skip = append(w.skip, f.env.ID)
		}
	}
	w.report(out)
	if w.hooks != nil {
		w.hooks(out)
	}
	ev.Delivered, ev.Failed, ev.Dead = len(out.delivered), len(out.failed), len(out.dead)
	if hooks.OnBatchStop != nil {
		hooks.OnBatchStop(ev)
	}
	return fetched, nil
}

// killUnreadable makes dead the messages of the last fetch that the engine cannot read.
func (w *worker) killUnreadable(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	out := outcome{dead: w.unreadable}
	if _, err := w.confirm(cctx, func(*sql.Tx) outcome { return out }); err != nil {
		return fmt.Errorf("record unreadable messages: %w", err)
	}
	w.unreadable = nil
	w.report(out)
	if w.hooks != nil {
		w.hooks(out)
	}
	return nil
}

// call runs a delivery, turning a panic into an error.
func (w *worker) call(deliver func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("relay panicked: %v", r)
		}
	}()
	return deliver()
}

func (w *worker) report(out outcome) {
	hooks, name := &w.o.cfg.Hooks, w.o.cfg.Name
	for _, f := range out.failed {
		w.log.Info("outboxer: delivery failed, will retry", "id", f.env.ID, "attempt", f.env.Attempts+1, "retry_in", f.delay, "err", f.err)
		if hooks.OnRetry != nil {
			hooks.OnRetry(MessageEvent{Name: name, Outbox: w.ob.name, Partition: w.part, ID: f.env.ID, Type: f.env.Type, GroupKey: f.env.GroupKey, Attempt: f.env.Attempts + 1, Err: f.err})
		}
	}
	for _, f := range out.dead {
		w.log.Warn("outboxer: message dead", "id", f.env.ID, "attempt", f.env.Attempts+1, "err", f.err)
		if hooks.OnDead != nil {
			hooks.OnDead(MessageEvent{Name: name, Outbox: w.ob.name, Partition: w.part, ID: f.env.ID, Type: f.env.Type, GroupKey: f.env.GroupKey, Attempt: f.env.Attempts + 1, Err: f.err})
		}
	}
}
