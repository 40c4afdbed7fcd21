// Scheduled: messages delivered later, with WithDelay and WithAvailableAt.
//
// An order's confirmation goes out at once; a payment reminder for the same order is
// scheduled 400 ms later with WithDelay, and a daily report (no group) for a moment
// 200 ms ahead with WithAvailableAt. The relay notes when each one reaches it and checks it
// against the envelope's AvailableAt: none may arrive before its time.
//
// A scheduled message with a group key holds back the later messages of its group until
// it is delivered: order is kept. Times are the database's clock; here SQLite shares the
// program's.
//
//	go run ./examples/scheduled
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite"

	"github.com/outboxer-go/outboxer/core"
)

type OrderConfirmed struct {
	OrderID int `json:"order_id"`
}

func (OrderConfirmed) Outbox() string     { return "notifications" }
func (e OrderConfirmed) GroupKey() string { return fmt.Sprintf("order:%d", e.OrderID) }

type PaymentReminder struct {
	OrderID int `json:"order_id"`
}

func (PaymentReminder) Outbox() string     { return "notifications" }
func (e PaymentReminder) GroupKey() string { return fmt.Sprintf("order:%d", e.OrderID) }

type DailyReport struct {
	Day string `json:"day"`
}

func (DailyReport) Outbox() string { return "notifications" }

// arrival is a message and the time it reached the relay.
type arrival struct {
	env core.Envelope
	at  time.Time
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, out io.Writer) error {
	dir, err := os.MkdirTemp("", "outboxer-scheduled")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return err
	}
	defer db.Close()
	if err := core.Migrate(ctx, db, core.MigrateOptions{}); err != nil {
		return err
	}

	arrivals := make(chan arrival, 8)
	relay := core.RelayFunc(func(ctx context.Context, batch []core.Envelope) error {
		for _, e := range batch {
			select {
			case arrivals <- arrival{e, time.Now()}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	ob, err := core.New(core.Config{
		DB:     db,
		Logger: slog.New(slog.DiscardHandler),
		Outboxes: map[string]core.OutboxConfig{
			"notifications": {Relay: relay, PollInterval: 20 * time.Millisecond},
		},
	})
	if err != nil {
		return err
	}

	publish := []struct {
		msg  core.Message
		opts []core.PublishOption
	}{
		{OrderConfirmed{OrderID: 1}, nil},
		{PaymentReminder{OrderID: 1}, []core.PublishOption{core.WithDelay(400 * time.Millisecond)}},
		{DailyReport{Day: "2025-01-31"}, []core.PublishOption{core.WithAvailableAt(time.Now().Add(200 * time.Millisecond))}},
	}
	due := map[int64]time.Time{} // the AvailableAt of each message, as stored
	for _, p := range publish {
		env, err := ob.Publish(ctx, db, p.msg, p.opts...)
		if err != nil {
			return err
		}
		due[env.ID] = env.AvailableAt
		fmt.Fprintf(out, "published #%d %s, due +%v\n", env.ID, env.Type, env.AvailableAt.Sub(env.CreatedAt).Round(100*time.Millisecond))
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ob.Run(runCtx) }()
	err = report(ctx, out, arrivals, due)
	stop()
	if runErr := <-done; err == nil {
		err = runErr
	}
	if err != nil {
		return err
	}
	c, err := ob.Counts(ctx, "notifications")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "pending %d\n", c.Pending)
	return nil
}

// report prints the arrivals of the published messages in the order they came, each
// checked against the time it was due.
func report(ctx context.Context, out io.Writer, arrivals <-chan arrival, due map[int64]time.Time) error {
	for range len(due) {
		select {
		case a := <-arrivals:
			verdict := "on time"
			if a.at.Before(due[a.env.ID]) {
				verdict = fmt.Sprintf("EARLY by %v", due[a.env.ID].Sub(a.at))
			}
			fmt.Fprintf(out, "delivered #%d %s %s: %s\n", a.env.ID, a.env.Type, a.env.Payload, verdict)
		case <-ctx.Done():
			return errors.New("not every message was delivered in time")
		}
	}
	return nil
}
