package dbtest_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// doubtfulConnector hands out connections whose next commit, once armed, goes through
// and then reports an error: a commit whose outcome the client cannot know.
type doubtfulConnector struct {
	inner driver.Driver
	dsn   string
	armed atomic.Bool
}

func (c *doubtfulConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.inner.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return doubtfulConn{conn, c}, nil
}

func (c *doubtfulConnector) Driver() driver.Driver { return c.inner }

type doubtfulConn struct {
	driver.Conn
	c *doubtfulConnector
}

func (d doubtfulConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := d.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return doubtfulTx{tx, d.c}, nil
}

type doubtfulTx struct {
	driver.Tx
	c *doubtfulConnector
}

func (t doubtfulTx) Commit() error {
	if err := t.Tx.Commit(); err != nil {
		return err
	}
	if t.c.armed.CompareAndSwap(true, false) {
		return errors.New("connection reset after the commit went through")
	}
	return nil
}

// Issue 16, investigated: a confirmation retried after a commit that went through but
// reported an error does not count the failed attempt twice (the failure update is guarded
// by the attempts the worker read).
func TestFailureRecordedOnceAfterACommitInDoubt(t *testing.T) {
	db := dbtest.SQLite(t)
	ctx := context.Background()
	setup(t, db, core.Config{PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {}}}) // migrate
	dc := &doubtfulConnector{inner: db.DB.Driver(), dsn: db.DSN}
	doubtful := sql.OpenDB(dc)
	t.Cleanup(func() { doubtful.Close() })
	rec := &recorder{}
	rec.Fail = func([]core.Envelope) error {
		dc.armed.Store(true) // the confirmation of this failure commits in doubt
		return errors.New("broker away")
	}
	var retries atomic.Int32
	ob, err := core.New(core.Config{DB: doubtful, Dialect: core.SQLite, Logger: quiet,
		Hooks: core.Hooks{OnRetry: func(core.MessageEvent) { retries.Add(1) }},
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: rec, PollInterval: 10 * time.Millisecond,
			Backoff: core.Backoff{Min: time.Hour, Max: time.Hour}}}})
	if err != nil {
		t.Fatal(err)
	}
	env := publish(t, ob, db.DB, event{Seq: 1})[0]
	run(t, ob)
	eventually(t, 20*time.Second, "the failure recorded", func() bool { return retries.Load() == 1 })
	pending, err := ob.ListPending(ctx, "orders", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 1 || pending[0].ID != env.ID || pending[0].Attempts != 1 || dc.armed.Load() {
		t.Fatalf("pending %+v (commit in doubt still armed: %v), want %d with 1 attempt", pending, dc.armed.Load(), env.ID)
	}
}

// queryHookConnector hands out connections that call before with each query's text and
// context before the query reaches the database: a test can stop a statement of the
// engine on its way, or see that it was sent.
type queryHookConnector struct {
	inner  driver.Driver
	dsn    string
	before func(ctx context.Context, query string)
}

// hookedDB is db seen through a queryHookConnector calling before.
func hookedDB(t testing.TB, db *dbtest.DB, before func(ctx context.Context, query string)) *dbtest.DB {
	t.Helper()
	h := *db
	h.DB = sql.OpenDB(&queryHookConnector{inner: db.DB.Driver(), dsn: db.DSN, before: before})
	t.Cleanup(func() { h.DB.Close() })
	return &h
}

func (c *queryHookConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.inner.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return queryHookConn{conn, c.before}, nil
}

func (c *queryHookConnector) Driver() driver.Driver { return c.inner }

// queryHookConn passes everything on to the driver's connection (the drivers the tests
// use have every method below but CheckNamedValue, which SQLite's lacks).
type queryHookConn struct {
	driver.Conn
	before func(ctx context.Context, query string)
}

func (c queryHookConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.before(ctx, query)
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (c queryHookConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (c queryHookConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c queryHookConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
}

func (c queryHookConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c queryHookConn) CheckNamedValue(v *driver.NamedValue) error {
	if ch, ok := c.Conn.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(v)
	}
	return driver.ErrSkip
}
