package dbtest

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"testing"
)

// Statement is a statement a Hooked handle is about to send to the database.
type Statement struct {
	Query string
	Args  []driver.NamedValue
	// Exec is true for a statement sent by ExecContext (no rows back), false for a query.
	Exec bool
}

// Hooked returns db seen through a handle of its own whose connections call before with
// each statement and its context before the statement reaches the database: a test can
// record what the code under test sends, or hold one of its statements on the way (before
// runs on the caller's goroutine; blocking in it blocks the statement). The handle is
// closed when the test ends.
func Hooked(t testing.TB, db *DB, before func(ctx context.Context, s Statement)) *DB {
	t.Helper()
	h := *db
	h.DB = sql.OpenDB(&hookConnector{inner: db.DB.Driver(), dsn: db.DSN, before: before})
	t.Cleanup(func() { h.DB.Close() })
	return &h
}

type hookConnector struct {
	inner  driver.Driver
	dsn    string
	before func(ctx context.Context, s Statement)
}

func (c *hookConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.inner.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return hookConn{conn, c.before}, nil
}

func (c *hookConnector) Driver() driver.Driver { return c.inner }

// hookConn passes everything on to the driver's connection (the drivers the tests use
// have every method below but CheckNamedValue, which SQLite's lacks).
type hookConn struct {
	driver.Conn
	before func(ctx context.Context, s Statement)
}

func (c hookConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.before(ctx, Statement{Query: query, Args: args})
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (c hookConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.before(ctx, Statement{Query: query, Args: args, Exec: true})
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (c hookConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c hookConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
}

func (c hookConn) Ping(ctx context.Context) error {
	if p, ok := c.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c hookConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c hookConn) CheckNamedValue(v *driver.NamedValue) error {
	if ch, ok := c.Conn.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(v)
	}
	return driver.ErrSkip
}
