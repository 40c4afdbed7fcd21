// Package drivercheck checks that Outboxer runs on a database/sql driver as its users
// open it: the dialect detected, and the errors the database raises for real read from
// the driver's own error type. It needs no test server of its own (it imports no
// driver, and not dbtest, whose drivers would clash with a driver registering the same
// name, as github.com/glebarez/go-sqlite does with modernc.org/sqlite's "sqlite").
package drivercheck

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/inbox"
	"github.com/outboxer-go/outboxer/internal/sqlerr"
)

// Check checks, on h, a handle through the driver under test on an empty database
// (PostgreSQL schema, MariaDB database or SQLite file) of dialect d, that Outboxer runs
// on the driver with no Dialect set and reads the driver's errors:
//   - core.DetectDialect names the driver's dialect; core.New and core.Migrate need no
//     Dialect; a message published before Migrate fails with core.ErrNotMigrated and,
//     after it, is stored and delivered;
//   - the database raises each error the core and the inbox act on, for real, and the
//     classification (serialization failure, deadlock, missing table or schema, lock
//     timeout, SQLite busy, unique violation) is read from the driver's own error;
//   - inbox.Handle runs again a handler whose first statement fails with SQLSTATE 40001
//     (PostgreSQL and MariaDB).
func Check(t *testing.T, h *sql.DB, d core.Dialect) {
	run := func(name string, f func(t *testing.T, ctx context.Context)) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			f(t, ctx)
		})
	}
	run("Detect", func(t *testing.T, ctx context.Context) { checkDetect(t, ctx, h, d) })
	run("MissingTable", func(t *testing.T, ctx context.Context) { checkMissingTable(t, ctx, h, d) })
	run("Unique", func(t *testing.T, ctx context.Context) { checkUnique(t, ctx, h, d) })
	switch d {
	case core.Postgres:
		run("SerializationFailure", func(t *testing.T, ctx context.Context) {
			_, err := h.ExecContext(ctx, `DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$`)
			expectClass(t, err, sqlerr.Serialization)
			if got := sqlerr.SQLState(err); got != "40001" {
				t.Errorf("SQLSTATE %q, want 40001 (%v)", got, err)
			}
		})
		run("Deadlock", func(t *testing.T, ctx context.Context) { checkDeadlock(t, ctx, h, d) })
		run("LockTimeout", func(t *testing.T, ctx context.Context) { checkLockTimeout(t, ctx, h, d) })
		run("InboxRetries", func(t *testing.T, ctx context.Context) {
			checkInboxRetry(t, ctx, h, `DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$`)
		})
	case core.MySQL:
		run("Deadlock", func(t *testing.T, ctx context.Context) { checkDeadlock(t, ctx, h, d) })
		run("LockTimeout", func(t *testing.T, ctx context.Context) { checkLockTimeout(t, ctx, h, d) })
		run("InboxRetries", func(t *testing.T, ctx context.Context) {
			checkInboxRetry(t, ctx, h, `SIGNAL SQLSTATE '40001' SET MESSAGE_TEXT = 'conflict'`)
		})
	case core.SQLite:
		run("Busy", func(t *testing.T, ctx context.Context) { checkBusy(t, ctx, h) })
	}
}

// order is the message Check publishes.
type order struct {
	ID int64 `json:"id"`
}

func (order) Outbox() string { return "orders" }

// recorder is a relay keeping the payloads it is given.
type recorder struct {
	mu       sync.Mutex
	payloads [][]byte
}

func (r *recorder) Deliver(_ context.Context, batch []core.Envelope) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range batch {
		r.payloads = append(r.payloads, e.Payload)
	}
	return nil
}

func (r *recorder) got() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.payloads)
}

func expectClass(t testing.TB, err error, want sqlerr.Class) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want a %s", want)
	}
	if got := sqlerr.Classify(err); got != want {
		t.Fatalf("classified %s, want %s: %T %v", got, want, rootCause(err), err)
	}
	// The class is read from the driver's error, not from the text: a wrapper that
	// keeps the chain and hides the text keeps the class.
	if got := sqlerr.Classify(fmt.Errorf("wrapped: %w", opaque{err})); got != want {
		t.Fatalf("wrapped, text hidden: classified %s, want %s: %T %v", got, want, rootCause(err), err)
	}
}

// opaque hides the text of the error it wraps.
type opaque struct{ err error }

func (opaque) Error() string   { return "opaque" }
func (o opaque) Unwrap() error { return o.err }

func rootCause(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}

func checkDetect(t *testing.T, ctx context.Context, h *sql.DB, want core.Dialect) {
	got, err := core.DetectDialect(h)
	if err != nil || got != want {
		t.Fatalf("DetectDialect: %q, %v; want %q", got, err, want)
	}
	rec := &recorder{}
	ob, err := core.New(core.Config{DB: h, Manual: true, Outboxes: map[string]core.OutboxConfig{"orders": {Relay: rec}}})
	if err != nil {
		t.Fatalf("core.New without a Dialect: %v", err)
	}
	if _, err := ob.Publish(ctx, h, order{ID: 1}); !errors.Is(err, core.ErrNotMigrated) {
		t.Fatalf("Publish before Migrate: %v, want ErrNotMigrated", err)
	}
	if err := core.Migrate(ctx, h, core.MigrateOptions{}); err != nil {
		t.Fatalf("core.Migrate without a Dialect: %v", err)
	}
	if _, err := ob.Publish(ctx, h, order{ID: 2}); err != nil {
		t.Fatalf("Publish after Migrate: %v", err)
	}
	res, err := ob.Drain(ctx, "orders")
	if err != nil || res.Delivered != 1 {
		t.Fatalf("Drain: %+v, %v; want 1 delivered", res, err)
	}
	if got := rec.got(); len(got) != 1 || string(got[0]) != `{"id":2}` {
		t.Fatalf("relayed %q, want [{\"id\":2}]", got)
	}
}

func checkMissingTable(t *testing.T, ctx context.Context, h *sql.DB, d core.Dialect) {
	_, err := h.ExecContext(ctx, "SELECT x FROM no_such_table")
	expectClass(t, err, sqlerr.MissingTable)
	if d == core.Postgres {
		_, err := h.ExecContext(ctx, "CREATE TABLE no_such_schema.t (x int)")
		expectClass(t, err, sqlerr.MissingTable)
		if got := sqlerr.SQLState(err); got != "3F000" {
			t.Errorf("SQLSTATE %q, want 3F000 (%v)", got, err)
		}
	}
}

// rowsTable creates the table name(id, v) with rows 1 and 2.
func rowsTable(t testing.TB, ctx context.Context, h *sql.DB, d core.Dialect, name string) {
	t.Helper()
	ddl := "CREATE TABLE " + name + " (id BIGINT NOT NULL PRIMARY KEY, v BIGINT NOT NULL)"
	if d == core.MySQL {
		ddl += " ENGINE=InnoDB"
	}
	for _, q := range []string{ddl, "INSERT INTO " + name + " (id, v) VALUES (1, 0), (2, 0)"} {
		if _, err := h.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func checkUnique(t *testing.T, ctx context.Context, h *sql.DB, d core.Dialect) {
	rowsTable(t, ctx, h, d, "unique_rows")
	_, err := h.ExecContext(ctx, "INSERT INTO unique_rows (id, v) VALUES (1, 1)")
	expectClass(t, err, sqlerr.Unique)
}

// conns pins two connections of h.
func conns(t testing.TB, ctx context.Context, h *sql.DB) (*sql.Conn, *sql.Conn) {
	t.Helper()
	var cs [2]*sql.Conn
	for i := range cs {
		c, err := h.Conn(ctx)
		if err != nil {
			t.Fatalf("conn: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	return cs[0], cs[1]
}

func exec(t testing.TB, ctx context.Context, c interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, q string) {
	t.Helper()
	if _, err := c.ExecContext(ctx, q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// checkDeadlock makes two transactions each lock the row the other needs next: the
// database breaks the deadlock by failing one of them.
func checkDeadlock(t *testing.T, ctx context.Context, h *sql.DB, d core.Dialect) {
	rowsTable(t, ctx, h, d, "deadlock_rows")
	a, b := conns(t, ctx, h)
	idA := sessionID(t, ctx, a, d)
	txA, err := a.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback()
	txB, err := b.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer txB.Rollback()
	exec(t, ctx, txA, "UPDATE deadlock_rows SET v = 1 WHERE id = 1")
	exec(t, ctx, txB, "UPDATE deadlock_rows SET v = 2 WHERE id = 2")
	errA := make(chan error, 1)
	go func() {
		_, err := txA.ExecContext(ctx, "UPDATE deadlock_rows SET v = 1 WHERE id = 2")
		if err != nil {
			txA.Rollback() // the victim's locks go: the other goes on
		}
		errA <- err
	}()
	waitLockWait(t, ctx, h, d, idA)
	_, errB := txB.ExecContext(ctx, "UPDATE deadlock_rows SET v = 2 WHERE id = 1")
	if errB != nil {
		txB.Rollback()
	}
	var victim error
	for _, err := range []error{<-errA, errB} {
		if err != nil {
			if victim != nil {
				t.Fatalf("both transactions failed: %v; %v", victim, err)
			}
			victim = err
		}
	}
	expectClass(t, victim, sqlerr.Deadlock)
	if !sqlerr.Retryable(victim) {
		t.Fatalf("a deadlock is not retryable: %v", victim)
	}
}

// waitLockWait waits until the session id (pg_backend_pid(), CONNECTION_ID()) waits
// for a lock.
func waitLockWait(t testing.TB, ctx context.Context, h *sql.DB, d core.Dialect, id int64) {
	t.Helper()
	q := "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'"
	if d == core.MySQL {
		q = "SELECT count(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = ? AND trx_state = 'LOCK WAIT'"
	}
	for {
		var n int
		if err := h.QueryRowContext(ctx, q, id).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no lock wait began: %v", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// sessionID is the database's id of the connection c.
func sessionID(t testing.TB, ctx context.Context, c *sql.Conn, d core.Dialect) int64 {
	t.Helper()
	q := "SELECT pg_backend_pid()"
	if d == core.MySQL {
		q = "SELECT CONNECTION_ID()"
	}
	var id int64
	if err := c.QueryRowContext(ctx, q).Scan(&id); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return id
}

// checkLockTimeout makes a statement wait for a row another transaction holds, with a
// lock timeout it runs out of.
func checkLockTimeout(t *testing.T, ctx context.Context, h *sql.DB, d core.Dialect) {
	rowsTable(t, ctx, h, d, "locked_rows")
	a, b := conns(t, ctx, h)
	txA, err := a.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback()
	exec(t, ctx, txA, "UPDATE locked_rows SET v = 1 WHERE id = 1")
	var lerr error
	if d == core.MySQL {
		exec(t, ctx, b, "SET SESSION innodb_lock_wait_timeout = 1")
		defer exec(t, context.WithoutCancel(ctx), b, "SET SESSION innodb_lock_wait_timeout = DEFAULT")
		_, lerr = b.ExecContext(ctx, "UPDATE locked_rows SET v = 2 WHERE id = 1")
	} else {
		txB, err := b.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer txB.Rollback()
		exec(t, ctx, txB, "SET LOCAL lock_timeout = '100ms'")
		_, lerr = txB.ExecContext(ctx, "UPDATE locked_rows SET v = 2 WHERE id = 1")
	}
	expectClass(t, lerr, sqlerr.LockTimeout)
	if sqlerr.Retryable(lerr) {
		t.Fatalf("a lock timeout taken as retryable: %v", lerr)
	}
}

// checkBusy makes a write wait, with no busy timeout, for another connection's write
// transaction.
func checkBusy(t *testing.T, ctx context.Context, h *sql.DB) {
	rowsTable(t, ctx, h, core.SQLite, "busy_rows")
	a, b := conns(t, ctx, h)
	exec(t, ctx, a, "BEGIN IMMEDIATE")
	defer exec(t, context.WithoutCancel(ctx), a, "ROLLBACK")
	exec(t, ctx, a, "UPDATE busy_rows SET v = 1 WHERE id = 1")
	var timeout int
	if err := b.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&timeout); err != nil {
		t.Fatal(err)
	}
	exec(t, ctx, b, "PRAGMA busy_timeout = 0")
	defer exec(t, context.WithoutCancel(ctx), b, fmt.Sprintf("PRAGMA busy_timeout = %d", timeout))
	_, err := b.ExecContext(ctx, "UPDATE busy_rows SET v = 2 WHERE id = 2")
	expectClass(t, err, sqlerr.Busy)
}

// checkInboxRetry runs inbox.Handle with a handler whose first run fails with raise, a
// statement the database fails with SQLSTATE 40001: Handle runs it again, and the
// message is claimed once.
func checkInboxRetry(t *testing.T, ctx context.Context, h *sql.DB, raise string) {
	if err := inbox.Migrate(ctx, h, inbox.MigrateOptions{}); err != nil {
		t.Fatalf("inbox.Migrate without a Dialect: %v", err)
	}
	in, err := inbox.New(inbox.Config{DB: h})
	if err != nil {
		t.Fatalf("inbox.New without a Dialect: %v", err)
	}
	var calls atomic.Int32
	o, err := in.Handle(ctx, "consumer", inbox.Message{Key: "m-40001"}, func(ctx context.Context, tx *sql.Tx, _ inbox.Outcome) error {
		if calls.Add(1) == 1 {
			_, err := tx.ExecContext(ctx, raise)
			if err == nil {
				return errors.New("the database raised no error")
			}
			return err
		}
		return nil
	})
	if err != nil || o != inbox.Claimed {
		t.Fatalf("Handle: %v, %v; want Claimed after a retry", o, err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2 (once failing with 40001, once more)", n)
	}
	o, err = in.Handle(ctx, "consumer", inbox.Message{Key: "m-40001"}, func(context.Context, *sql.Tx, inbox.Outcome) error {
		t.Error("handler ran for a duplicate")
		return nil
	})
	if err != nil || o != inbox.Duplicate {
		t.Fatalf("Handle again: %v, %v; want Duplicate", o, err)
	}
}
