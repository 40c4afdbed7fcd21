// Watermill: orders on embedded SQLite, their events relayed to a Watermill publisher.
//
// The publisher is Watermill's in-process GoChannel, with a subscriber that prints what
// arrives; swap in any message.Publisher (AMQP, NATS, Kafka…) to reach a real broker.
// One order is rolled back, and its event never leaves the database.
//
//	go run ./examples/watermill
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

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "modernc.org/sqlite"

	"github.com/outboxer-go/outboxer/core"
	watermillsink "github.com/outboxer-go/outboxer/sinks/watermill"
)

// OrderPlaced is the event; its group key keeps one order's events in sequence.
type OrderPlaced struct {
	OrderID int     `json:"order_id"`
	Total   float64 `json:"total"`
}

func (OrderPlaced) Outbox() string      { return "orders" }
func (OrderPlaced) MessageType() string { return "orders.OrderPlaced" }
func (e OrderPlaced) GroupKey() string  { return fmt.Sprintf("order:%d", e.OrderID) }

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, out io.Writer) error {
	dir, err := os.MkdirTemp("", "outboxer-watermill")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL NOT NULL)`); err != nil {
		return err
	}
	if err := core.Migrate(ctx, db, core.MigrateOptions{}); err != nil {
		return err
	}

	// The broker: GoChannel keeps the publish order with BlockPublishUntilSubscriberAck.
	pubsub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	defer pubsub.Close()
	messages, err := pubsub.Subscribe(ctx, "orders")
	if err != nil {
		return err
	}
	const expected = 2
	received := make(chan struct{})
	go func() {
		defer close(received)
		for range expected {
			msg, ok := <-messages
			if !ok {
				return // the context ended first
			}
			fmt.Fprintf(out, "received %s %s %s\n", msg.Metadata.Get(watermillsink.MetadataType),
				msg.Metadata.Get(watermillsink.MetadataGroupKey), msg.Payload)
			msg.Ack()
		}
	}()

	sink, err := watermillsink.New(pubsub, watermillsink.Options{Topic: "orders"})
	if err != nil {
		return err
	}
	ob, err := core.New(core.Config{
		DB:       db,
		Logger:   slog.New(slog.DiscardHandler),
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: sink, PollInterval: 50 * time.Millisecond}},
	})
	if err != nil {
		return err
	}

	// Each order and its event commit together; order 2 is rolled back with its event.
	for _, o := range []OrderPlaced{{1, 25.50}, {2, 99.00}, {3, 12.75}} {
		err := ob.InTx(ctx, db, func(tx *sql.Tx, p *core.TxPublisher) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, total) VALUES (?, ?)`, o.OrderID, o.Total); err != nil {
				return err
			}
			if _, err := p.Publish(ctx, o); err != nil {
				return err
			}
			if o.OrderID == 2 {
				return errors.New("payment declined")
			}
			return nil
		})
		fmt.Fprintf(out, "order %d: %v\n", o.OrderID, orOK(err))
	}

	// Run relays until its context ends; stop it once the subscriber has everything.
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ob.Run(runCtx) }()
	select {
	case <-received:
	case <-ctx.Done():
	}
	stop()
	if err := <-done; err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("waiting for the subscriber: %w", err)
	}
	c, err := ob.Counts(ctx, "orders")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "pending %d, dead %d\n", c.Pending, c.Dead)
	return nil
}

func orOK(err error) string {
	if err != nil {
		return "rolled back (" + err.Error() + ")"
	}
	return "committed"
}
