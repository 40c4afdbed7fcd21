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
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/outboxer-go/outboxer/core/internal/dialect"
	"github.com/outboxer-go/outboxer/internal/dbtime"
)

// worker delivers one partition of one outbox. At most one worker in the whole cluster
// holds a partition's lease; only the holder fetches, and every confirmation is fenced
// by the lease token and the owner in the same transaction (a token alone can come back:
// lease rows dropped and created again restart at 0).
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

	// promotedAt is when the due waiting rows were last made ready; fullAt whether the
	// last fetch came back full (busy: promote now and then, not before every batch).
	promotedAt time.Time
	full       bool
	once       bool // Drain: promote once, so that what fails during the call waits
	relayName  string
	// unreadable holds the messages of the last fetch whose headers cannot be read.
	unreadable []failure
	// pauses is the box's count of Pause and Resume calls when the flag was last read.
	pauses uint64
	// hooks, when set, sees every confirmed outcome (Drain counts with it).
	hooks func(outcome)
	// bal, under Run, is the node's share of the outbox's partitions; counted says
	// whether this worker's partition counts in it (held, or being taken).
	bal     *balance
	counted bool
	// aside lists the blocked groups being set aside (see setaside.go).
	aside asides
}

// totalGroup stands for the whole partition in OrderTotal.
const totalGroup = "\x00total"

func newWorker(o *Outboxer, ob *box, part int, owner string) *worker {
	return &worker{
		o: o, ob: ob, part: part, owner: owner,
		log:       o.cfg.Logger.With("outboxer", o.cfg.Name, "outbox", ob.name, "partition", part),
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

// newOwner names a node for the lease and node tables: the instance's name, host,
// process and a random suffix, so two instances never share a name.
// ownerNameRunes bounds the Config.Name part of an owner: with a host name of up to 64
// characters, a process ID and the suffix, the owner fits 255 characters.
const ownerNameRunes = 160

func newOwner(name string) string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	// The name is cut to ownerNameRunes runes: the owner columns hold 255 characters on
	// MySQL, and a longer owner could neither take a lease nor heartbeat there.
	// Control characters (a newline, a tab) become "_": tools print owners in tables.
	if r := []rune(name); len(r) > ownerNameRunes {
		name = string(r[:ownerNameRunes])
	}
	name = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '_'
		}
		return r
	}, name)
	return fmt.Sprintf("%s@%s/%d/%s", name, host, os.Getpid(), hex.EncodeToString(b))
}

func (w *worker) lease() time.Duration { return w.o.cfg.LeaseDuration }

// acquire tries to take the partition's lease, without waiting for a lease row another
// transaction has locked (see dialect AcquireLease). It reports whether it holds it.
func (w *worker) acquire(ctx context.Context) (bool, error) {
	return w.takeLease(ctx, w.ob.sql.AcquireLease)
}

// takeLease takes the partition's lease with the statement q (AcquireLease or AwaitLease).
func (w *worker) takeLease(ctx context.Context, q string) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	// Taking a lease is not cut short halfway: the worker must know whether it holds it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	s := w.ob.sql
	start := time.Now()
	var (
		took   bool
		token  int64
		paused bool
	)
	err := w.o.committed(ctx, func(db handle) error {
		res, err := db.ExecContext(ctx, q, w.owner, w.lease().Microseconds(), w.ob.name, w.part)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return nil
		}
		if err := db.QueryRowContext(ctx, s.ReadLease, w.ob.name, w.part, w.owner).Scan(&token, &paused); err != nil {
			return fmt.Errorf("read lease: %w", err)
		}
		took = true
		return nil
	})
	if isLockBusy(err) {
		// A transaction of the holder has the row: not free now.
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("acquire lease: %w", err)
	}
	if !took {
		return false, nil
	}
	w.token, w.held, w.paused = token, true, paused
	w.renewedAt = start
	w.trust(start)
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
	s := w.ob.sql
	start := time.Now()
	var renewed, read bool
	var paused bool
	err := w.o.committed(ctx, func(db handle) error {
		res, err := db.ExecContext(ctx, s.RenewLease, w.lease().Microseconds(), w.ob.name, w.part, w.token, w.owner)
		if err != nil {
			return fmt.Errorf("renew lease: %w", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return nil
		}
		renewed = true
		var token int64
		if err := db.QueryRowContext(ctx, s.ReadLease, w.ob.name, w.part, w.owner).Scan(&token, &paused); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return nil
			}
			return fmt.Errorf("read lease: %w", err)
		}
		read = true
		return nil
	})
	if err != nil {
		return err
	}
	if !renewed || !read {
		w.lost()
		return ErrLeaseLost
	}
	w.renewedAt = start
	w.trust(start)
	w.paused = paused
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
	if err := w.o.execCommitted(ctx, w.ob.sql.ReleaseLease, w.ob.name, w.part, w.owner); err != nil {
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

// promoteEvery is how often a busy worker makes due waiting rows ready; an idle one does
// it before every fetch.
const promoteEvery = 50 * time.Millisecond

// promote makes the partition's due waiting rows (scheduled, or waiting for a retry)
// ready. The worker owns the partition, so nothing else promotes them.
func (w *worker) promote(ctx context.Context) error {
	if w.once && !w.promotedAt.IsZero() {
		return nil
	}
	if w.full && time.Since(w.promotedAt) < promoteEvery {
		return nil
	}
	w.promotedAt = time.Now()
	if err := w.o.execCommitted(ctx, w.ob.sql.Promote, w.ob.name, w.part); err != nil {
		return fmt.Errorf("promote due messages: %w", err)
	}
	return nil
}

// nextDue is how long until the partition's next waiting row is due (0: none waits).
func (w *worker) nextDue(ctx context.Context) (time.Duration, error) {
	var micros sql.NullInt64
	if err := w.o.committed(ctx, func(db handle) error {
		return db.QueryRowContext(ctx, w.ob.sql.NextDue, w.ob.name, w.part).Scan(&micros)
	}); err != nil {
		return 0, fmt.Errorf("next due message: %w", err)
	}
	if !micros.Valid {
		return 0, nil
	}
	return max(time.Duration(micros.Int64)*time.Microsecond, time.Millisecond), nil
}

// fetch reads the next ready messages of the partition in ID order. Those behind a
// waiting or held message of their group are not in the batch: behind lists them.
func (w *worker) fetch(ctx context.Context) (batch []Envelope, behind []int64, fetched int, err error) {
	q, args := w.ob.sql.Fetch(w.ob.name, w.part, w.ob.cfg.BatchSize, w.mode())
	if len(w.aside.skip) > 0 {
		q, args = w.ob.sql.FetchAround(w.ob.name, w.part, w.ob.cfg.BatchSize, w.aside.skip)
	}
	var exec Executor = w.o.cfg.DB
	if w.o.strictIsolation(ctx) {
		// The pool reads at another level: read only what is committed, whatever it says.
		tx, err := w.o.cfg.DB.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted, ReadOnly: true})
		if err != nil {
			return nil, nil, 0, err
		}
		defer tx.Rollback()
		exec = tx
	}
	dying := map[string]bool{} // groups with an unreadable message in this fetch
	err = queryRows(ctx, exec, q, args, func(scan func(...any) error) error {
		var (
			back  bool
			dbNow dbtime.Time
		)
		e, err := w.scanFetched(scan, &back, &dbNow)
		var he *headersError
		unreadable := errors.As(err, &he)
		if err != nil && !unreadable {
			return err
		}
		fetched++
		if back {
			behind = append(behind, e.ID)
			if w.mode() == dialect.Grouped {
				w.aside.note(e.GroupKey, e.ID)
			}
			return nil
		}
		g := w.group(&e)
		if g != "" && dying[g] {
			return nil // ready again once the unreadable one is dead
		}
		if unreadable {
			// It goes dead alone, with the reason; its group waits for that, the
			// partition does not.
			w.unreadable = append(w.unreadable, failure{env: &e, err: Permanent(he)})
			if g != "" {
				dying[g] = true
			}
			return nil
		}
		batch = append(batch, e)
		return nil
	})
	if len(batch) > 0 {
		w.aside.readyAt = time.Now()
	}
	return batch, behind, fetched, err
}

// hold makes the given ready rows held, in a transaction fenced by the lease: a worker
// that lost its partition must not hold rows its successor would never release.
func (w *worker) hold(ctx context.Context, ids []int64) error {
	err := w.retry(ctx, func() error {
		return w.fenced(ctx, func(tx *sql.Tx) error {
			q, args := w.ob.sql.Hold(w.ob.name, w.part, ids, w.mode() == dialect.Grouped)
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				return fmt.Errorf("hold messages: %w", err)
			}
			return nil
		})
	})
	if err == nil && w.o.cfg.Dialect == Postgres && w.ob.setAside.Add(int64(len(ids))) >= vacuumAfterSetAside {
		select {
		case w.o.vacuumSoon <- struct{}{}:
		default:
		}
	}
	return err
}

// fenced runs f in a transaction that first checks (and extends) the lease, and commits it.
func (w *worker) fenced(ctx context.Context, f func(*sql.Tx) error) error {
	start := time.Now()
	tx, err := w.o.cfg.DB.BeginTx(ctx, w.o.txOptions())
	if err != nil {
		return err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, w.ob.sql.FenceLease, w.lease().Microseconds(), w.ob.name, w.part, w.token, w.owner)
	if err != nil {
		return fmt.Errorf("check lease: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		w.lost()
		return ErrLeaseLost
	}
	if err := f(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	w.trust(start)
	return nil
}

// releases lists the groups whose held rows an outcome frees: those of the messages
// that were waiting (retried or scheduled) and are now delivered or dead. nil: none;
// in OrderTotal, a list with totalGroup for the whole partition.
func (w *worker) releases(batch []Envelope, out outcome) []string {
	if w.ob.cfg.Ordering == OrderNone {
		return nil
	}
	byID := make(map[int64]*Envelope, len(batch))
	for i := range batch {
		byID[batch[i].ID] = &batch[i]
	}
	seen := map[string]bool{}
	var groups []string
	add := func(e *Envelope) {
		if g := w.group(e); g != "" && !seen[g] {
			seen[g] = true
			groups = append(groups, g)
		}
	}
	for _, id := range out.delivered {
		if e := byID[id]; e != nil && (e.Attempts > 0 || e.AvailableAt.After(e.CreatedAt)) {
			add(e)
		}
	}
	for _, f := range out.dead {
		add(f.env)
	}
	return groups
}

// releaseHeld makes the held rows of groups ready again, in the confirming transaction.
func (w *worker) releaseHeld(ctx context.Context, tx *sql.Tx, groups []string) error {
	if len(groups) == 0 {
		return nil
	}
	if groups[0] == totalGroup {
		groups = nil
	}
	q, args := w.ob.sql.Release(w.ob.name, w.part, groups)
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("release held messages: %w", err)
	}
	return nil
}

// scanFetched reads a row of the fetch query: only the columns the worker does not know
// already (the outbox, the partition and the state are its own), as scanning is most of
// a fetch's cost in Go.
func (w *worker) scanFetched(scan func(...any) error, behind *bool, dbNow *dbtime.Time) (Envelope, error) {
	var (
		e         Envelope
		headers   *string
		lastError *string
		created   dbtime.Time
		available dbtime.Time
	)
	if err := scan(&e.ID, &e.Type, &e.GroupKey, &e.Payload, &headers, &e.Attempts, &lastError, &created, &available, behind, dbNow); err != nil {
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
	// A relay's error is any bytes; the column is text, which PostgreSQL refuses with a
	// NUL and MariaDB with invalid UTF-8: a failure that cannot be recorded would be
	// delivered again forever. Keep valid UTF-8, without NUL, cut between characters.
	s := strings.ToValidUTF8(err.Error(), "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) > 2000 {
		cut := 2000
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

// confirm records an outcome in one transaction that first checks (and extends) the lease:
// a worker that lost its partition changes nothing. With a TxRelay, deliver runs inside
// that transaction, after the check.
//
// A confirmation that fails for a passing reason (a deadlock with a publisher on MySQL, a
// dropped connection) is tried again a few times: giving up means delivering the batch again.
func (w *worker) confirm(ctx context.Context, batch []Envelope, deliverTx func(*sql.Tx) outcome) (out outcome, err error) {
	err = w.retry(ctx, func() error {
		out, err = w.confirmOnce(ctx, batch, deliverTx)
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
	args = append([]any{w.lease().Microseconds(), w.ob.name, w.part, w.token, w.owner}, args...)
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

func (w *worker) confirmOnce(ctx context.Context, batch []Envelope, deliverTx func(*sql.Tx) outcome) (out outcome, err error) {
	s := w.ob.sql
	err = w.fenced(ctx, func(tx *sql.Tx) error {
		out = deliverTx(tx)
		if len(out.delivered) > 0 {
			var q string
			var args []any
			if w.ob.cfg.Retention.keep > 0 {
				q, args = s.MarkDelivered(out.delivered)
			} else {
				q, args = s.DeletePending(out.delivered)
			}
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				return fmt.Errorf("confirm delivered: %w", err)
			}
		}
		for _, f := range out.failed {
			if _, err := tx.ExecContext(ctx, s.FailMessage, errString(f.err), f.delay.Microseconds(), f.env.ID, f.env.Attempts); err != nil {
				return fmt.Errorf("record failure of %d: %w", f.env.ID, err)
			}
		}
		for _, f := range out.dead {
			if _, err := tx.ExecContext(ctx, s.KillMessage, errString(f.err), f.env.ID, f.env.Attempts); err != nil {
				return fmt.Errorf("record dead %d: %w", f.env.ID, err)
			}
		}
		return w.releaseHeld(ctx, tx, w.releases(batch, out))
	})
	if err != nil {
		return outcome{}, err
	}
	return out, nil
}

// deliverTx hands a batch to a TxRelay, narrowing it when it fails (see narrowing). Each
// delivery and the removal of its delivered rows commit together, in one transaction
// under the delivery's deadline. The failures are recorded after them, in a transaction
// of their own that the deadline cannot end and that a statement which aborted a
// delivery's transaction cannot spoil: attempts count, MaxAttempts and Permanent apply,
// and a failing batch does not go again at once.
func (w *worker) deliverTx(ctx, bctx, dctx context.Context, txr TxRelay, batch []Envelope) (outcome, error) {
	out, err := w.deliverNarrowed(ctx, bctx, dctx, batch, func(dctx context.Context, part []Envelope) tried {
		return w.deliverPartTx(dctx, txr, part)
	})
	if err != nil {
		// The relay was not called (lease lost, database away): no attempt to record.
		return outcome{}, err
	}
	if len(out.failed) == 0 && len(out.dead) == 0 {
		return out, nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	record := outcome{failed: out.failed, dead: out.dead}
	if _, err := w.confirm(cctx, batch, func(*sql.Tx) outcome { return record }); err != nil {
		return outcome{}, fmt.Errorf("record failures: %w", err)
	}
	return out, nil
}

// deliverInTx runs DeliverTx in a transaction fenced by the lease and commits it with
// the delivered rows removed (and the groups they held released); it rolls back when
// nothing was delivered. res is what the relay returned; called says whether it was called.
func (w *worker) deliverInTx(ctx context.Context, txr TxRelay, batch []Envelope) (out outcome, res error, called bool, err error) {
	s := w.ob.sql
	err = w.fenced(ctx, func(tx *sql.Tx) error {
		called = true
		res = w.call(func() error { return txr.DeliverTx(ctx, tx, batch) })
		out = w.judge(ctx, batch, res)
		if len(out.delivered) == 0 {
			return errNothingDelivered
		}
		var q string
		var args []any
		if w.ob.cfg.Retention.keep > 0 {
			q, args = s.MarkDelivered(out.delivered)
		} else {
			q, args = s.DeletePending(out.delivered)
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("confirm delivered: %w", err)
		}
		return w.releaseHeld(ctx, tx, w.releases(batch, outcome{delivered: out.delivered}))
	})
	if errors.Is(err, errNothingDelivered) {
		return out, res, true, nil // rolled back: nothing to commit
	}
	if err != nil && called {
		return outcome{}, res, true, fmt.Errorf("deliver in transaction: %w", err)
	}
	return out, res, called, err
}

// errNothingDelivered rolls back a delivery transaction in which nothing was delivered.
var errNothingDelivered = errors.New("nothing delivered")

// step fetches one batch, hands it to the relay and confirms it. It reports how many
// messages it fetched (0: nothing to do now).
func (w *worker) step(ctx, hard context.Context) (int, error) {
	if w.due() {
		if err := w.renew(ctx); err != nil {
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
	if err := w.promote(ctx); err != nil {
		return 0, err
	}
	set, err := w.setAside(ctx)
	if err != nil {
		return 0, fmt.Errorf("set aside: %w", err)
	}
	w.unreadable = w.unreadable[:0]
	batch, behind, fetched, err := w.fetch(ctx)
	if err != nil {
		return 0, fmt.Errorf("fetch: %w", err)
	}
	if len(w.unreadable) > 0 {
		if err := w.killUnreadable(ctx); err != nil {
			return 0, err
		}
	}
	w.full = fetched >= w.ob.cfg.BatchSize
	if len(behind) > 0 {
		// Read once: held, they are in no later fetch until their group moves.
		if err := w.hold(ctx, behind); err != nil {
			return 0, err
		}
	}
	if len(batch) == 0 {
		// Rows that were read (or set aside) were held; look again at once.
		return fetched + set, nil
	}
	if w.ob.pauses.Load() != w.pauses {
		// Pause or Resume was called on this instance while the batch was read: what was
		// read after Pause returned must not go out. The rows stay ready; the next step
		// reads the flag.
		return fetched, nil
	}
	hooks, name := &w.o.cfg.Hooks, w.o.cfg.Name
	ev := BatchEvent{Name: name, Outbox: w.ob.name, Partition: w.part, Relay: w.relayName, Count: len(batch), Fetched: fetched}
	if hooks.OnBatchStart != nil {
		hooks.OnBatchStart(ev)
	}
	began := time.Now()

	bctx := hard
	if hooks.OnBatchContext != nil {
		if c := hooks.OnBatchContext(hard, ev); c != nil {
			bctx = c
		}
	}
	// The delivery ends before the lease could run out, and at the delivery timeout.
	dctx, cancel := w.deliveryContext(bctx)
	defer cancel()

	var out outcome
	if txr, ok := w.ob.cfg.Relay.(TxRelay); ok {
		out, err = w.deliverTx(ctx, bctx, dctx, txr, batch)
	} else {
		out, _ = w.deliverNarrowed(ctx, bctx, dctx, batch, w.deliverPlain)
		// Confirm even after a cancelled delivery: what was delivered must be recorded.
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer ccancel()
		if w.o.kind == dialect.Postgres && !w.o.strictIsolation(cctx) && len(out.failed) == 0 && len(out.dead) == 0 &&
			len(out.delivered) > 0 && len(w.releases(batch, out)) == 0 {
			err = w.retry(cctx, func() error { return w.confirmAll(cctx, out.delivered) })
		} else {
			out, err = w.confirm(cctx, batch, func(*sql.Tx) outcome { return out })
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
	if _, err := w.confirm(cctx, nil, func(*sql.Tx) outcome { return out }); err != nil {
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
