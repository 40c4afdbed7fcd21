package pgxoutbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxer-go/outboxer/core"
)

// Listener opens the sessions an instance with core.Config.Notify listens on, each a
// pgx connection of its own: set it as core.Config.NotifyListener. Use it when Config.DB
// reaches PostgreSQL through a pooler in transaction mode (PgBouncer, RDS Proxy,
// Supavisor, pgcat), where LISTEN does not stay on a session, or through a driver other
// than pgx. Its DSN must reach PostgreSQL itself (or a pooler port in session mode); the
// engine checks each session with a test notification and, when it does not arrive,
// logs a Warn and polls.
type Listener struct {
	cfg *pgx.ConnConfig
}

// NewListener returns a Listener connecting with dsn (a postgres:// URL or a libpq
// keyword/value string, as pgx.ParseConfig reads it). Its statements use the simple
// protocol, so they prepare nothing on the server.
func NewListener(dsn string) (*Listener, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("outboxer: notify listener: %w", err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	return &Listener{cfg: cfg}, nil
}

// Connect opens a new session.
func (l *Listener) Connect(ctx context.Context) (core.NotifyConn, error) {
	if l == nil || l.cfg == nil {
		return nil, errNil("notify listener")
	}
	c, err := pgx.ConnectConfig(ctx, l.cfg.Copy())
	if err != nil {
		return nil, fmt.Errorf("outboxer: notify listener: %w", err)
	}
	return listenConn{c}, nil
}

// listenConn is one session of a Listener.
type listenConn struct{ c *pgx.Conn }

func (l listenConn) Listen(ctx context.Context, channel string) error {
	_, err := l.c.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize())
	return err
}

func (l listenConn) ListeningChannels(ctx context.Context) ([]string, error) {
	rows, err := l.c.Query(ctx, `SELECT pg_listening_channels()`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func (l listenConn) WaitForNotification(ctx context.Context) (core.Notification, error) {
	n, err := l.c.WaitForNotification(ctx)
	if err != nil {
		return core.Notification{}, err
	}
	return core.Notification{Channel: n.Channel, Payload: n.Payload}, nil
}

func (l listenConn) Close(ctx context.Context) error { return l.c.Close(ctx) }
