package core

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// NotifyListener opens the database sessions Notify listens on (Config.NotifyListener).
// LISTEN needs a session of its own that the server keeps for as long as it listens,
// which a pooler in transaction mode (PgBouncer, RDS Proxy, Supavisor, pgcat) does not
// give: point the listener at PostgreSQL itself, or at a pooler port in session mode.
// Package pgxoutbox (module github.com/outboxer-go/outboxer/adapters/pgx) has one for a
// DSN, whatever driver Config.DB uses.
type NotifyListener interface {
	// Connect opens a new session. The engine calls it again after a session fails.
	Connect(ctx context.Context) (NotifyConn, error)
}

// NotifyConn is one session of a NotifyListener. The engine uses it from one goroutine.
type NotifyConn interface {
	// Listen runs LISTEN on the channel, quoted as an identifier.
	Listen(ctx context.Context, channel string) error
	// ListeningChannels returns what pg_listening_channels() returns on this session.
	ListeningChannels(ctx context.Context) ([]string, error)
	// WaitForNotification blocks until a notification arrives on this session, the
	// session fails, or ctx is done. The engine closes the session after an error.
	WaitForNotification(ctx context.Context) (Notification, error)
	// Close ends the session.
	Close(ctx context.Context) error
}

// Notification is a notification a NotifyConn received.
type Notification struct {
	Channel, Payload string
}

// ErrNotifyNotListening: the Notify listener cannot work on its session: the session is
// not kept between statements (a pooler in transaction mode), or the driver cannot wait
// for notifications. The engine logs it at Warn and delivers by polling meanwhile.
var ErrNotifyNotListening = errors.New("outboxer: Notify is not listening")

// Timings of the listener.
const (
	// probeTimeout bounds the wait for the test notification of a new session.
	probeTimeout = 5 * time.Second
	// notListeningRetry is the first wait before a session that did not keep LISTEN is
	// tried again; it doubles up to notListeningRetryMax.
	notListeningRetry    = 30 * time.Second
	notListeningRetryMax = 10 * time.Minute
)

// listen holds one session in LISTEN on the notification channel of every table and
// wakes the workers of the outboxes named in each notification, until ctx is done. It
// reconnects when the session is lost, and wakes every worker after reconnecting, as
// notifications may have been missed meanwhile.
//
// Each new session is checked before it is trusted: a channel of its own must be in
// pg_listening_channels() right after its LISTEN, and a test notification on that
// channel, sent through Config.DB once the session listens on every channel, must reach
// it. A session that fails the check is logged at Warn, and the
// workers poll every PollInterval until a later session passes it.
func (o *Outboxer) listen(ctx context.Context) {
	defer o.listener.Store(nil)
	wait, idle := 100*time.Millisecond, notListeningRetry
	for ctx.Err() == nil {
		verified, err := o.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		o.setNotifyStatus(false, err)
		if errors.Is(err, ErrNotifyNotListening) {
			o.cfg.Logger.Warn("outboxer: Notify is NOT working: falling back to polling every PollInterval; give Config.NotifyListener a direct session (pgxoutbox.NewListener)",
				"outboxer", o.cfg.Name, "err", err, "retry_in", idle)
			if !sleep(ctx, idle) {
				return
			}
			idle = min(idle*2, notListeningRetryMax)
			continue
		}
		if verified {
			wait, idle = 100*time.Millisecond, notListeningRetry
		}
		o.cfg.Logger.Warn("outboxer: notification listener lost its connection", "outboxer", o.cfg.Name, "err", err, "retry_in", wait)
		if !sleep(ctx, wait) {
			return
		}
		wait = min(wait*2, 5*time.Second)
	}
}

var errProbeTimeout = errors.New("the test notification did not arrive")

// NotifyStatus is the state of an instance's Notify listener (see NotifyStatus).
type NotifyStatus struct {
	// Listening: a session listens, and passed its check.
	Listening bool
	// Since is when the session passed its check, or when Err happened.
	Since time.Time
	// Err, when not Listening, is the last failure: one matching ErrNotifyNotListening
	// when LISTEN did not hold on the session (the workers poll meanwhile), or the error
	// that ended the last session. It is nil while the first session is being checked,
	// and when the listener does not run.
	Err error
}

// NotifyStatus says whether this instance's Notify listener listens now. With Notify
// set, a running relay instance that is not Listening delivers by polling every
// PollInterval only: a readiness check can report it. Without Notify, or while Run does
// not run (PublishOnly and Manual instances never listen), it is the zero NotifyStatus.
func (o *Outboxer) NotifyStatus() NotifyStatus {
	if st := o.listener.Load(); st != nil {
		return *st
	}
	return NotifyStatus{}
}

func (o *Outboxer) setNotifyStatus(listening bool, err error) {
	o.listener.Store(&NotifyStatus{Listening: listening, Since: time.Now(), Err: err})
}

// listenOnce listens on one session until it fails. verified says whether the session
// passed its check.
func (o *Outboxer) listenOnce(ctx context.Context) (verified bool, err error) {
	l := o.cfg.NotifyListener
	if l == nil {
		l = sqlListener{o.cfg.DB}
	}
	conn, err := l.Connect(ctx)
	if err != nil {
		return false, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	var channels []string
	for _, s := range o.tables {
		if !slices.Contains(channels, s.NotifyChannel) {
			channels = append(channels, s.NotifyChannel)
		}
	}
	// First a channel only this session listens on, for the test notification: it must
	// be in pg_listening_channels() on the session right after, or the session is not kept.
	probe := "outboxer.probe." + rand.Text()
	if err := conn.Listen(ctx, probe); err != nil {
		return false, err
	}
	listening, err := conn.ListeningChannels(ctx)
	if err != nil {
		return false, err
	}
	if !slices.Contains(listening, probe) {
		return false, fmt.Errorf("%w: channel %q is not in pg_listening_channels() right after LISTEN on the same session: the session is not kept between statements (a pooler in transaction mode?)", ErrNotifyNotListening, probe)
	}
	for _, ch := range channels {
		if err := conn.Listen(ctx, ch); err != nil {
			return false, err
		}
	}
	// The test notification goes last: it reaches this session only if the session kept
	// every LISTEN above.
	if _, err := o.cfg.DB.ExecContext(ctx, `SELECT pg_notify($1, 'probe')`, probe); err != nil {
		return false, fmt.Errorf("send the test notification: %w", err)
	}
	// Listening: anything committed before now was missed.
	for _, ob := range o.outboxes {
		ob.signalAll(wakeNow)
	}
	// Until the test notification arrives, the wait is bounded by probeTimeout.
	probing, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := time.AfterFunc(probeTimeout, func() { cancel(errProbeTimeout) })
	defer timer.Stop()
	waitCtx := probing
	for {
		n, err := conn.WaitForNotification(waitCtx)
		if err != nil {
			if !verified && errors.Is(context.Cause(probing), errProbeTimeout) && ctx.Err() == nil {
				return false, fmt.Errorf("%w: %w within %v on a session whose LISTEN looked fine: its notifications do not reach it (a pooler in transaction mode?)", ErrNotifyNotListening, errProbeTimeout, probeTimeout)
			}
			return verified, err
		}
		if n.Channel == probe {
			if !verified {
				verified, waitCtx = true, ctx
				timer.Stop()
				o.setNotifyStatus(true, nil)
				o.cfg.Logger.Info("outboxer: listening for notifications", "outboxer", o.cfg.Name, "channels", channels)
			}
			continue
		}
		o.notified(n.Payload)
	}
}

// sqlListener listens on a connection of a *sql.DB of the pgx driver.
type sqlListener struct{ db *sql.DB }

func (l sqlListener) Connect(ctx context.Context) (NotifyConn, error) {
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	if err := conn.Raw(func(dc any) error { _, err := notificationWaiter(dc); return err }); err != nil {
		conn.Close()
		return nil, fmt.Errorf("%w: %w; or set Config.NotifyListener", ErrNotifyNotListening, err)
	}
	return sqlNotifyConn{conn}, nil
}

type sqlNotifyConn struct{ conn *sql.Conn }

func (c sqlNotifyConn) Listen(ctx context.Context, channel string) error {
	_, err := c.conn.ExecContext(ctx, `LISTEN "`+strings.ReplaceAll(channel, `"`, `""`)+`"`)
	return err
}

func (c sqlNotifyConn) ListeningChannels(ctx context.Context) ([]string, error) {
	rows, err := c.conn.QueryContext(ctx, `SELECT pg_listening_channels()`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var ch string
		if err := rows.Scan(&ch); err != nil {
			return nil, err
		}
		out = append(out, ch)
	}
	return out, rows.Err()
}

func (c sqlNotifyConn) WaitForNotification(ctx context.Context) (n Notification, err error) {
	err = c.conn.Raw(func(dc any) error {
		wait, err := notificationWaiter(dc)
		if err != nil {
			return err
		}
		n, err = wait(ctx)
		return err
	})
	return n, err
}

// Close stops listening, so that the connection goes back to the pool as it came.
func (c sqlNotifyConn) Close(ctx context.Context) error {
	_, _ = c.conn.ExecContext(ctx, `UNLISTEN *`)
	return c.conn.Close()
}

// notified wakes the workers a notification names ("outbox:p1,p2", or "outbox" for all
// its partitions), or every worker when it names nothing this instance knows.
func (o *Outboxer) notified(payload string) {
	if name, ok := strings.CutSuffix(payload, ":"+nodesPayload); ok {
		if _, ok := o.outboxes[name]; ok {
			// Partitions were given back, or a node left: read the membership again and
			// offer the free partitions to the idle workers now.
			select {
			case o.refresh <- struct{}{}:
			default:
			}
			return
		}
	}
	name, parts := splitPayload(payload)
	if ob, ok := o.outboxes[name]; ok {
		if parts == "" {
			ob.signalAll(wakeNow)
			return
		}
		for _, f := range strings.Split(parts, ",") {
			if p, err := strconv.Atoi(f); err == nil && p >= 0 && p < len(ob.wake) {
				ob.signal(p, wakeNow)
			} else {
				ob.signalAll(wakeNow) // another node knows other partitions: wake them all
				return
			}
		}
		return
	}
	for _, ob := range o.outboxes {
		ob.signalAll(wakeNow)
	}
}

// splitPayload splits a notification into the outbox name and the partition list. The
// name may hold colons too: the list is what follows the last one, when it is a list of
// numbers.
func splitPayload(payload string) (name, parts string) {
	i := strings.LastIndexByte(payload, ':')
	if i < 0 {
		return payload, ""
	}
	parts = payload[i+1:]
	for _, f := range strings.Split(parts, ",") {
		if _, err := strconv.Atoi(f); err != nil {
			return payload, "" // a name ending in a colon and something else
		}
	}
	return payload[:i], parts
}

// notificationWaiter returns a function waiting for the next notification on a pgx
// connection (github.com/jackc/pgx/v5/stdlib), reached through reflection so that the
// core does not depend on the driver.
func notificationWaiter(driverConn any) (func(context.Context) (Notification, error), error) {
	get := reflect.ValueOf(driverConn).MethodByName("Conn")
	if !get.IsValid() || get.Type().NumIn() != 0 || get.Type().NumOut() != 1 {
		return nil, fmt.Errorf("Notify on Config.DB needs the pgx driver (github.com/jackc/pgx/v5/stdlib), got %T", driverConn)
	}
	pgxConn := get.Call(nil)[0]
	wait := pgxConn.MethodByName("WaitForNotification")
	if !wait.IsValid() {
		return nil, fmt.Errorf("Notify on Config.DB needs the pgx driver (github.com/jackc/pgx/v5/stdlib), got %T", driverConn)
	}
	return func(ctx context.Context) (Notification, error) {
		out := wait.Call([]reflect.Value{reflect.ValueOf(ctx)})
		if err, _ := out[1].Interface().(error); err != nil {
			return Notification{}, err
		}
		n := out[0]
		if n.Kind() == reflect.Pointer {
			if n.IsNil() {
				return Notification{}, errors.New("empty notification")
			}
			n = n.Elem()
		}
		return Notification{Channel: n.FieldByName("Channel").String(), Payload: n.FieldByName("Payload").String()}, nil
	}, nil
}
