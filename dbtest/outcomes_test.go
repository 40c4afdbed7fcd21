package dbtest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// failingTxRelay fails every delivery in the transaction it is given: with a statement
// that fails (on PostgreSQL, it aborts the transaction), or by waiting for the delivery
// deadline. It counts its calls.
type failingTxRelay struct {
	calls     atomic.Int32
	deadline  bool // wait for ctx instead of running a failing statement
	permanent bool
}

func (r *failingTxRelay) Deliver(context.Context, []core.Envelope) error {
	return errors.New("Deliver called on a TxRelay")
}

func (r *failingTxRelay) DeliverTx(ctx context.Context, tx *sql.Tx, batch []core.Envelope) error {
	r.calls.Add(1)
	var err error
	if r.deadline {
		<-ctx.Done()
		err = ctx.Err()
	} else {
		_, err = tx.ExecContext(ctx, `INSERT INTO no_such_table VALUES (1)`)
		if err == nil {
			err = errors.New("the failing statement did not fail")
		}
	}
	if r.permanent {
		return core.Permanent(err)
	}
	return err
}

// With a TxRelay, a failed delivery is recorded (in a transaction of
// its own): attempts count, MaxAttempts and Permanent make the message dead, and the batch
// is not handed over again past that.
func TestTxRelayFailuresAreRecorded(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		for _, c := range []struct {
			name      string
			relay     *failingTxRelay
			attempts  int
			wantCalls int32
		}{
			{"aborting statement", &failingTxRelay{}, 3, 3},
			{"delivery deadline", &failingTxRelay{deadline: true}, 2, 2},
			{"permanent", &failingTxRelay{permanent: true}, 0, 1},
		} {
			t.Run(c.name, func(t *testing.T) {
				ctx := context.Background()
				name := strings.ReplaceAll(c.name, " ", "_")
				ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{name: {
					Relay: c.relay, PollInterval: 10 * time.Millisecond, MaxAttempts: c.attempts,
					DeliveryTimeout: 200 * time.Millisecond, Backoff: core.Backoff{Min: time.Millisecond, Max: 5 * time.Millisecond}}}})
				env := publish(t, ob, db.DB, event{Box: name, Seq: 1, Group: "a"})[0]
				run(t, ob)
				eventually(t, 30*time.Second, "the message dead", func() bool { return counts(t, ob, name).Dead == 1 })
				dead, err := ob.ListDead(ctx, name, 0)
				if err != nil {
					t.Fatal(err)
				}
				if len(dead) != 1 || dead[0].ID != env.ID || dead[0].Attempts != int(c.wantCalls) || dead[0].LastError == "" {
					t.Fatalf("dead: %+v, want message %d with %d attempts and a reason", dead, env.ID, c.wantCalls)
				}
				// Dead: the relay is not called for it any more.
				calls := c.relay.calls.Load()
				time.Sleep(100 * time.Millisecond)
				if n := c.relay.calls.Load(); n != c.wantCalls || calls != n {
					t.Fatalf("DeliverTx called %d then %d times, want %d", calls, n, c.wantCalls)
				}
			})
		}
	})
}

// A row whose headers the engine cannot read (written by another
// program) goes dead alone with the reason, the rest of its partition and its own group
// flow, and ListPending lists it while it is pending.
func TestUnreadableHeadersGoDeadAlone(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		rec := &recorder{}
		ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: rec, PollInterval: 10 * time.Millisecond}}})
		envs := publish(t, ob, db.DB, event{Seq: 1, Group: "a"}, event{Seq: 2, Group: "a"}, event{Seq: 3, Group: "b"}, event{Seq: 4})
		bad := envs[0].ID
		if _, err := db.ExecContext(ctx, placeholders(db.Dialect, `UPDATE outboxer_messages SET headers = ? WHERE id = ?`), `{"attempt":1}`, bad); err != nil {
			t.Fatal(err)
		}
		pending, err := ob.ListPending(ctx, "orders", 0)
		if err != nil {
			t.Fatalf("ListPending with an unreadable row: %v", err)
		}
		if len(pending) != 4 || pending[0].ID != bad || pending[0].Headers != nil || !strings.Contains(pending[0].LastError, "headers") {
			t.Fatalf("ListPending: %+v, want all 4 with %d listed with the reason", pending, bad)
		}
		if string(pending[1].Payload) != string(envs[1].Payload) {
			t.Fatalf("ListPending: payload of %d is %q", pending[1].ID, pending[1].Payload)
		}
		run(t, ob)
		eventually(t, 20*time.Second, "the readable messages delivered", func() bool { return len(rec.delivered()) == 3 })
		eventually(t, 20*time.Second, "the unreadable one dead", func() bool { return counts(t, ob, "orders").Dead == 1 })
		for _, e := range rec.delivered() {
			if e.ID == bad {
				t.Fatalf("the unreadable message was delivered")
			}
		}
		dead, err := ob.ListDead(ctx, "orders", 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(dead) != 1 || dead[0].ID != bad || !strings.Contains(dead[0].LastError, "headers") {
			t.Fatalf("dead: %+v, want %d with the headers named", dead, bad)
		}
		// The relay saw the three; their confirmations may still be on the way.
		eventually(t, 20*time.Second, "nothing pending", func() bool { return counts(t, ob, "orders").Pending == 0 })
	})
}

// MariaDB: on a pool whose sessions read uncommitted, the engine still
// reads only committed rows: a message of a transaction that rolls back is never delivered.
func TestReadUncommittedPoolDeliversNoRolledBackMessage(t *testing.T) {
	db := dbtest.MariaDB(t)
	ctx := context.Background()
	cfg, err := mysql.ParseDSN(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["tx_isolation"] = "'READ-UNCOMMITTED'"
	dirty, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dirty.Close() })
	var level string
	if err := dirty.QueryRowContext(ctx, `SELECT @@tx_isolation`).Scan(&level); err != nil || level != "READ-UNCOMMITTED" {
		t.Fatalf("the pool reads at %q (%v), want READ-UNCOMMITTED", level, err)
	}
	rec := &recorder{}
	setup(t, db, core.Config{PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {}}}) // migrate
	ob, err := core.New(core.Config{DB: dirty, Logger: quiet, Outboxes: map[string]core.OutboxConfig{"orders": {
		Relay: rec, PollInterval: 5 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	run(t, ob)
	for round := range 5 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		doomed := publish(t, ob, tx, event{Seq: round, Group: "doomed"})[0]
		// A committed message after it: once it is delivered, fetches have gone past the
		// uncommitted row many times.
		marker := publish(t, ob, db.DB, event{Seq: round, Group: "marker"})[0]
		eventually(t, 20*time.Second, "the marker delivered", func() bool {
			for _, e := range rec.delivered() {
				if e.ID == marker.ID {
					return true
				}
			}
			return false
		})
		time.Sleep(50 * time.Millisecond) // more polls past the uncommitted row
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		for _, e := range rec.delivered() {
			if e.ID == doomed.ID {
				t.Fatalf("round %d: message %d of a transaction that rolled back was delivered", round, doomed.ID)
			}
		}
	}
}

// PostgreSQL: with SERIALIZABLE as the sessions' default, the engine's
// confirmations do not fail and nothing is delivered twice, under publishers that run
// concurrently with the delivery.
func TestSerializableDefaultDeliversOnceWithoutFailedConfirmations(t *testing.T) {
	db := dbtest.Postgres(t)
	ctx := context.Background()
	u, err := url.Parse(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("default_transaction_isolation", "serializable")
	u.RawQuery = q.Encode()
	strict, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { strict.Close() })
	var level string
	if err := strict.QueryRowContext(ctx, `SHOW transaction_isolation`).Scan(&level); err != nil || level != "serializable" {
		t.Fatalf("the pool's default is %q (%v), want serializable", level, err)
	}
	setup(t, db, core.Config{PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {}}}) // migrate
	rec := &recorder{}
	var exceptions atomic.Int32
	var firstException atomic.Value
	ob, err := core.New(core.Config{DB: strict, Logger: quiet,
		Hooks: core.Hooks{OnBatchException: func(ev core.BatchEvent) {
			exceptions.Add(1)
			firstException.CompareAndSwap(nil, ev.Err.Error())
		}},
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: rec, Partitions: 4, BatchSize: 20, PollInterval: 5 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	run(t, ob)
	const publishers, txs, per = 4, 40, 12
	var wg sync.WaitGroup
	errs := make(chan error, publishers)
	for p := range publishers {
		wg.Go(func() {
			for i := range txs {
				msgs := make([]core.Message, per)
				for j := range msgs {
					msgs[j] = event{Seq: (p*txs+i)*per + j, Group: fmt.Sprint("g", j%6)}
				}
				// The application's own transactions, at the default (serializable): a
				// serialization failure is the application's to retry.
				for try := 0; ; try++ {
					err := ob.InTx(ctx, strict, func(_ *sql.Tx, p *core.TxPublisher) error {
						_, err := p.PublishAll(ctx, msgs)
						return err
					})
					if err == nil {
						break
					}
					if try == 20 {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("publish: %v", err)
	}
	total := publishers * txs * per
	eventually(t, 60*time.Second, "every message delivered", func() bool { return counts(t, ob, "orders").Pending == 0 })
	got := rec.delivered()
	seen := map[int64]int{}
	for _, e := range got {
		seen[e.ID]++
	}
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	if len(seen) != total || dups != 0 || exceptions.Load() != 0 {
		t.Fatalf("delivered %d distinct of %d, %d duplicates, %d failed confirmations (first: %v)",
			len(seen), total, dups, exceptions.Load(), firstException.Load())
	}
}

// An idle worker whose PollInterval is longer than the lease keeps
// its lease: the partition stays owned between polls.
func TestIdleWorkerKeepsItsLease(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		ob := setup(t, db, core.Config{LeaseDuration: 2 * time.Second, Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: &recorder{}, Partitions: 2, PollInterval: time.Minute}}})
		run(t, ob)
		owned := func() (bool, []core.PartitionHealth) {
			st, err := ob.Status(ctx, "orders")
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range st {
				if !p.LeaseHeld {
					return false, st
				}
			}
			return true, st
		}
		eventually(t, 20*time.Second, "both partitions owned", func() bool { ok, _ := owned(); return ok })
		// Three leases' worth of idle time, with no publish to wake the workers.
		for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if ok, st := owned(); !ok {
				t.Fatalf("an idle partition lost its lease between polls: %+v", st)
			}
		}
	})
}

// The fetch half of Pause: a worker that read its paused flag just before
// Pause and fetched just after it returned must not deliver what it fetched; messages
// published after Pause returned wait for Resume. (Seen on SQLite under -race: 40
// messages published right after Pause went out.) The worker's fetch is stopped on its
// way to the database, past the worker's look at the flag, while Pause returns and the
// late messages commit.
func TestPauseHoldsWhatIsPublishedAfterIt(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		var (
			stall       atomic.Bool // stop the next fetch until release
			released    atomic.Bool
			leaseReads  atomic.Int32 // the worker's reads of its lease and paused flag after the release
			reached     = make(chan struct{})
			release     = make(chan struct{})
			releaseOnce = sync.OnceFunc(func() { released.Store(true); close(release) })
		)
		hooked := dbtest.Hooked(t, db, func(ctx context.Context, s dbtest.Statement) {
			q := s.Query
			switch {
			case strings.HasPrefix(q, "SELECT id, type, group_key, payload") && stall.CompareAndSwap(true, false):
				close(reached)
				select {
				case <-release:
				case <-ctx.Done():
				}
			case strings.HasPrefix(q, "SELECT token, paused FROM") && released.Load():
				leaseReads.Add(1)
			}
		})
		var resumed atomic.Bool
		var early, late, delivered atomic.Int32 // early, late: the late messages delivered before Resume, in all
		relay := core.RelayFunc(func(ctx context.Context, batch []core.Envelope) error {
			delivered.Add(int32(len(batch)))
			for _, e := range batch {
				if e.GroupKey == "late" {
					late.Add(1)
					if !resumed.Load() {
						early.Add(1)
					}
				}
			}
			return nil
		})
		ob := setup(t, hooked, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: relay, PollInterval: 10 * time.Millisecond}}})
		run(t, ob)
		t.Cleanup(releaseOnce) // before Run stops
		publish(t, ob, db.DB, event{Seq: 1, Group: "g"})
		eventually(t, 20*time.Second, "the first message delivered", func() bool { return delivered.Load() == 1 })
		stall.Store(true)
		select {
		case <-reached:
		case <-time.After(30 * time.Second):
			t.Fatal("the worker did not fetch within 30s (the fetch's text changed?)")
		}
		if err := ob.Pause(ctx, "orders"); err != nil {
			t.Fatal(err)
		}
		for i := range 40 {
			publish(t, ob, db.DB, event{Seq: 10000 + i, Group: "late"})
		}
		releaseOnce()
		// The worker's next step reads the flag: by then the fetched batch went out or not.
		eventually(t, 20*time.Second, "the worker to read its paused flag", func() bool { return leaseReads.Load() > 0 })
		if n := early.Load(); n != 0 {
			t.Fatalf("%d messages published after Pause returned were delivered before Resume", n)
		}
		resumed.Store(true)
		if err := ob.Resume(ctx, "orders"); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "the late messages after Resume", func() bool { return late.Load() == 40 })
	})
}

// Pause is at once on the instance that pauses: its busy worker
// starts no batch after the one in flight.
func TestPauseIsAtOnceOnThePausingInstance(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		var paused atomic.Bool
		var after atomic.Int32 // batches started after Pause returned
		var delivered atomic.Int32
		relay := core.RelayFunc(func(ctx context.Context, batch []core.Envelope) error {
			if paused.Load() {
				after.Add(1)
			}
			time.Sleep(3 * time.Millisecond)
			delivered.Add(int32(len(batch)))
			return nil
		})
		ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: relay, BatchSize: 5, PollInterval: 10 * time.Millisecond}}})
		msgs := make([]core.Message, 3000)
		for i := range msgs {
			msgs[i] = event{Seq: i, Group: fmt.Sprint("g", i%7)}
		}
		publish(t, ob, db.DB, msgs...)
		run(t, ob)
		eventually(t, 20*time.Second, "the worker busy", func() bool { return delivered.Load() > 50 })
		if err := ob.Pause(ctx, "orders"); err != nil {
			t.Fatal(err)
		}
		paused.Store(true)
		// The lease is renewed every 5s: a worker that waited for it would go on for that long.
		time.Sleep(time.Second)
		// One batch may have been fetched before Pause returned and handed over after.
		if n := after.Load(); n > 1 {
			t.Fatalf("%d batches started after Pause returned, want at most 1", n)
		}
		if err := ob.Resume(ctx, "orders"); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "the rest after Resume", func() bool { return int(delivered.Load()) == len(msgs) })
	})
}

// A delivery the engine cancels itself (the shutdown timeout) is not
// a failed attempt: with MaxAttempts 1 the message stays pending, attempts 0.
func TestShutdownCancellationIsNotAnAttempt(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		for _, tx := range []bool{false, true} {
			t.Run(map[bool]string{false: "Deliver", true: "DeliverTx"}[tx], func(t *testing.T) {
				inside := make(chan struct{}, 1)
				var relay core.Relay = core.RelayFunc(func(ctx context.Context, batch []core.Envelope) error {
					inside <- struct{}{}
					<-ctx.Done() // only the shutdown timeout ends it
					return ctx.Err()
				})
				if tx {
					relay = blockingTxRelay{relay}
				}
				box := map[bool]string{false: "plain", true: "tx"}[tx]
				ob := setup(t, db, core.Config{ShutdownTimeout: 100 * time.Millisecond, Outboxes: map[string]core.OutboxConfig{
					box: {Relay: relay, MaxAttempts: 1, PollInterval: 10 * time.Millisecond}}})
				env := publish(t, ob, db.DB, event{Box: box, Seq: 1})[0]
				stop := run(t, ob)
				<-inside
				stop()
				pending, err := ob.ListPending(ctx, box, 0)
				if err != nil {
					t.Fatal(err)
				}
				if c := counts(t, ob, box); c.Dead != 0 || len(pending) != 1 || pending[0].ID != env.ID || pending[0].Attempts != 0 {
					t.Fatalf("after a shutdown cut the delivery: counts %+v, pending %+v; want it pending with no attempt", c, pending)
				}
			})
		}
	})
}

// The other cancellation the engine makes: a delivery cut short
// because the partition's lease could run out before it ends is not a failed attempt
// either. The first batch starts late (its start hook stalls the worker, as a long GC
// pause or a starved CPU would), so the lease ends before the delivery timeout; the
// relay sees the lease as its context's cause. With MaxAttempts 1, a cut counted as an
// attempt would make the message dead; it must stay pending and go on the next batch.
func TestLeaseDeadlineCancellationIsNotAnAttempt(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		for _, tx := range []bool{false, true} {
			t.Run(map[bool]string{false: "Deliver", true: "DeliverTx"}[tx], func(t *testing.T) {
				var calls atomic.Int32
				causes := make(chan error, 1)
				var relay core.Relay = core.RelayFunc(func(ctx context.Context, batch []core.Envelope) error {
					if calls.Add(1) == 1 {
						<-ctx.Done()
						causes <- context.Cause(ctx)
						return ctx.Err()
					}
					return nil
				})
				if tx {
					relay = blockingTxRelay{relay}
				}
				var stalls atomic.Int32
				box := map[bool]string{false: "plain", true: "tx"}[tx]
				ob := setup(t, db, core.Config{
					LeaseDuration: 2 * time.Second,
					Hooks: core.Hooks{OnBatchStart: func(core.BatchEvent) {
						if stalls.Add(1) == 1 {
							time.Sleep(1400 * time.Millisecond) // the lease has 0.6 s left, the delivery timeout is 1 s
						}
					}},
					Outboxes: map[string]core.OutboxConfig{box: {
						Relay: relay, MaxAttempts: 1, PollInterval: 10 * time.Millisecond, DeliveryTimeout: time.Second}}})
				env := publish(t, ob, db.DB, event{Box: box, Seq: 1})[0]
				run(t, ob)
				select {
				case cause := <-causes:
					if cause == nil || !strings.Contains(cause.Error(), "lease") {
						t.Fatalf("the first delivery ended with cause %v, want the lease's", cause)
					}
				case <-time.After(30 * time.Second):
					t.Fatal("the first delivery never ended")
				}
				eventually(t, 30*time.Second, "the message delivered on the next batch", func() bool { return calls.Load() >= 2 })
				eventually(t, 30*time.Second, "the delivery confirmed", func() bool { return counts(t, ob, box).Pending == 0 })
				if c := counts(t, ob, box); c.Dead != 0 {
					t.Fatalf("counts %+v: the cut delivery made message %d dead", c, env.ID)
				}
			})
		}
	})
}

type blockingTxRelay struct{ core.Relay }

func (r blockingTxRelay) DeliverTx(ctx context.Context, _ *sql.Tx, batch []core.Envelope) error {
	return r.Deliver(ctx, batch)
}

// Run can be called again after it failed while starting (here, on
// tables not migrated yet, until its context ended).
func TestRunAgainAfterAFailedStart(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		rec := &recorder{}
		ob, err := core.New(core.Config{DB: db.DB, Logger: quiet, Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: rec, PollInterval: 10 * time.Millisecond}}})
		if err != nil {
			t.Fatal(err)
		}
		// Run waits for the migration until its context ends.
		short, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if err := ob.Run(short); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, core.ErrNotMigrated) {
			t.Fatalf("Run on tables not migrated: %v, want an error matching its context's and ErrNotMigrated", err)
		}
		if err := ob.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		publish(t, ob, db.DB, event{Seq: 1})
		run(t, ob)
		eventually(t, 20*time.Second, "the message delivered by the second Run", func() bool { return len(rec.delivered()) == 1 })
	})
}

// A relay that returns a nil *PartialFailure (a typed nil in an
// error) delivered its batch; nothing panics.
func TestTypedNilPartialFailureIsSuccess(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		relay := core.RelayFunc(func(context.Context, []core.Envelope) error {
			var pf *core.PartialFailure
			return pf
		})
		ob := setup(t, db, core.Config{Manual: true, Outboxes: map[string]core.OutboxConfig{"orders": {Relay: relay}}})
		publish(t, ob, db.DB, event{Seq: 1, Group: "a"}, event{Seq: 2, Group: "a"}, event{Seq: 3})
		res, err := ob.Drain(ctx, "orders")
		if err != nil || res.Delivered != 3 || res.Failed != 0 {
			t.Fatalf("Drain: %+v, %v; want 3 delivered", res, err)
		}
		if c := counts(t, ob, "orders"); c.Pending != 0 || c.Dead != 0 {
			t.Fatalf("counts %+v, want nothing left", c)
		}
	})
}
