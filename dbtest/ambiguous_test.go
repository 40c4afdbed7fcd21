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

// A confirmation retried after a commit that went through but
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
