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
