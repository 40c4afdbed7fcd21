package watermillsink_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "modernc.org/sqlite"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
	watermillsink "github.com/outboxer-go/outboxer/sinks/watermill"
)

// A billing consumer behind the inbox middleware: the relay delivers order 42's message
// twice, and the invoice is written once. The handler writes in the middleware's
// transaction (Tx); the router acknowledges each delivery after the commit.
func ExampleMiddleware() {
	dir, _ := os.MkdirTemp("", "billing")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", dbtest.SQLiteDSN(filepath.Join(dir, "billing.db")))
	defer db.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in, err := inbox.New(inbox.Config{DB: db})
	if err != nil {
		panic(err)
	}
	if err := in.Migrate(ctx); err != nil {
		panic(err)
	}
	db.ExecContext(ctx, `CREATE TABLE invoices (order_id TEXT)`)

	pubsub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	defer pubsub.Close()
	router, _ := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	router.AddMiddleware(watermillsink.Middleware(in, "billing"))
	router.AddConsumerHandler("billing", "orders", pubsub, func(msg *message.Message) error {
		tx, _ := watermillsink.Tx(msg)
		_, err := tx.ExecContext(msg.Context(), `INSERT INTO invoices (order_id) VALUES (?)`, string(msg.Payload))
		return err
	})
	go router.Run(ctx)
	<-router.Running()

	sink, _ := watermillsink.New(pubsub, watermillsink.Options{Topic: "orders"})
	order := core.Envelope{ID: 1, Outbox: "orders", Type: "order.placed", Payload: []byte(`42`)}
	for range 2 { // the relay delivers the message again (after a crash, say)
		if err := sink.Deliver(ctx, []core.Envelope{order}); err != nil {
			panic(err)
		}
	}
	var n int
	db.QueryRowContext(ctx, `SELECT count(*) FROM invoices`).Scan(&n)
	fmt.Println("invoices:", n)
	// Output:
	// invoices: 1
}

// A consumer of a topic that another publisher writes to as well: its message carries
// no outboxer key, so the handler does not run for it. The OnForeign policy here
// copies it to a table and returns nil, so the router acks it; without the option the
// middleware would ack it with a warning (inbox.SkipForeign), and with
// inbox.StopOnForeign the router would nack it.
func ExampleOnForeign() {
	dir, _ := os.MkdirTemp("", "billing")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", dbtest.SQLiteDSN(filepath.Join(dir, "billing.db")))
	defer db.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in, _ := inbox.New(inbox.Config{DB: db})
	in.Migrate(ctx)
	db.ExecContext(ctx, `CREATE TABLE invoices (order_id TEXT)`)
	db.ExecContext(ctx, `CREATE TABLE dead_letters (uuid TEXT, body BLOB)`)

	pubsub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	defer pubsub.Close()
	router, _ := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	router.AddMiddleware(watermillsink.Middleware(in, "billing",
		watermillsink.OnForeign(func(ctx context.Context, m inbox.ForeignMessage) error {
			_, err := db.ExecContext(ctx, `INSERT INTO dead_letters (uuid, body) VALUES (?, ?)`, m.ID, m.Payload)
			return err // nil: the router acks the message; an error nacks it
		})))
	router.AddConsumerHandler("billing", "orders", pubsub, func(msg *message.Message) error {
		tx, _ := watermillsink.Tx(msg)
		_, err := tx.ExecContext(msg.Context(), `INSERT INTO invoices (order_id) VALUES (?)`, string(msg.Payload))
		return err
	})
	go router.Run(ctx)
	<-router.Running()

	// Another publisher's message, then the relay's.
	pubsub.Publish("orders", message.NewMessage("legacy-7", []byte(`legacy 7`)))
	sink, _ := watermillsink.New(pubsub, watermillsink.Options{Topic: "orders"})
	sink.Deliver(ctx, []core.Envelope{{ID: 1, Outbox: "orders", Type: "order.placed", Payload: []byte(`42`)}})

	var invoices, letters int
	db.QueryRowContext(ctx, `SELECT count(*) FROM invoices`).Scan(&invoices)
	db.QueryRowContext(ctx, `SELECT count(*) FROM dead_letters WHERE uuid = 'legacy-7'`).Scan(&letters)
	fmt.Println("invoices:", invoices, "dead letters:", letters)
	// Output:
	// invoices: 1 dead letters: 1
}
