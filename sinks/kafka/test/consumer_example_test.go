package kafka_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	_ "modernc.org/sqlite"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
	"github.com/outboxer-go/outboxer/sinks/kafka"
)

// A billing consumer of the orders topic with an inbox: the relay wrote order 42's
// record twice, and the invoice is written once. Each record's handler runs in a
// transaction that claims the record's key (HeaderKey) first; offsets are committed
// after the transactions.
func ExampleConsumer() {
	cluster, _ := kfake.NewCluster(kfake.SeedTopics(1, "orders"))
	defer cluster.Close()
	dir, _ := os.MkdirTemp("", "billing")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", dbtest.SQLiteDSN(filepath.Join(dir, "billing.db")))
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The outbox side: the relay delivers the same row twice (after a crash, say).
	relay, _ := kafka.New(kafka.Config{Brokers: cluster.ListenAddrs(), Topic: "orders"})
	defer relay.Close()
	order := core.Envelope{ID: 1, Outbox: "orders", Type: "order.placed", Payload: []byte(`42`)}
	for range 2 {
		if err := relay.Deliver(ctx, []core.Envelope{order}); err != nil {
			panic(err)
		}
	}

	// The consumer side.
	in, err := inbox.New(inbox.Config{DB: db})
	if err != nil {
		panic(err)
	}
	if err := in.Migrate(ctx); err != nil {
		panic(err)
	}
	db.ExecContext(ctx, `CREATE TABLE invoices (order_id TEXT)`)
	client, _ := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumerGroup("billing"),
		kgo.ConsumeTopics("orders"), kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer client.Close()
	consumer, err := kafka.NewConsumer(kafka.ConsumerConfig{Client: client, Inbox: in, Name: "billing",
		Handler: func(ctx context.Context, tx *sql.Tx, rec *kgo.Record, _ inbox.Outcome) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO invoices (order_id) VALUES (?)`, string(rec.Value))
			return err
		}})
	if err != nil {
		panic(err)
	}
	// Run polls and handles until ctx ends; here we take the two records by hand,
	// with HandleRecord (what Run does for each), and commit after each.
	for handled := 0; handled < 2 && ctx.Err() == nil; {
		for _, rec := range client.PollRecords(ctx, 1).Records() {
			o, err := consumer.HandleRecord(ctx, rec)
			fmt.Println(o, err)
			client.CommitRecords(ctx, rec)
			handled++
		}
	}
	var n int
	db.QueryRowContext(ctx, `SELECT count(*) FROM invoices`).Scan(&n)
	fmt.Println("invoices:", n)
	// Output:
	// claimed <nil>
	// duplicate <nil>
	// invoices: 1
}

// A consumer on a topic that another producer writes to as well: its record carries no
// outboxer-key, so the handler does not run for it. The OnForeign policy here
// dead-letters it to a table and returns nil, so the consumer commits past it; the
// default policy (inbox.SkipForeign) would only log it, and inbox.StopOnForeign would
// stop Run at it.
func ExampleConsumerConfig_onForeign() {
	cluster, _ := kfake.NewCluster(kfake.SeedTopics(1, "orders"))
	defer cluster.Close()
	dir, _ := os.MkdirTemp("", "billing")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", dbtest.SQLiteDSN(filepath.Join(dir, "billing.db")))
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Another producer's record, then an outbox message.
	client, _ := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.DefaultProduceTopic("orders"),
		kgo.ConsumerGroup("billing"), kgo.ConsumeTopics("orders"), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer client.Close()
	client.ProduceSync(ctx, &kgo.Record{Value: []byte(`legacy 7`)})
	relay, _ := kafka.New(kafka.Config{Brokers: cluster.ListenAddrs(), Topic: "orders"})
	defer relay.Close()
	relay.Deliver(ctx, []core.Envelope{{ID: 1, Outbox: "orders", Type: "order.placed", Payload: []byte(`42`)}})

	in, _ := inbox.New(inbox.Config{DB: db})
	in.Migrate(ctx)
	db.ExecContext(ctx, `CREATE TABLE invoices (order_id TEXT)`)
	db.ExecContext(ctx, `CREATE TABLE dead_letters (source TEXT, body BLOB)`)
	consumer, err := kafka.NewConsumer(kafka.ConsumerConfig{Client: client, Inbox: in, Name: "billing",
		Handler: func(ctx context.Context, tx *sql.Tx, rec *kgo.Record, _ inbox.Outcome) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO invoices (order_id) VALUES (?)`, string(rec.Value))
			return err
		},
		OnForeign: func(ctx context.Context, m inbox.ForeignMessage) error {
			_, err := db.ExecContext(ctx, `INSERT INTO dead_letters (source, body) VALUES (?, ?)`, m.ID, m.Payload)
			return err // nil: the consumer commits past the record
		}})
	if err != nil {
		panic(err)
	}
	for handled := 0; handled < 2 && ctx.Err() == nil; {
		for _, rec := range client.PollRecords(ctx, 1).Records() {
			o, err := consumer.HandleRecord(ctx, rec)
			fmt.Println(o, err)
			client.CommitRecords(ctx, rec)
			handled++
		}
	}
	var source, body string
	db.QueryRowContext(ctx, `SELECT source, body FROM dead_letters`).Scan(&source, &body)
	fmt.Println("dead letter:", source, body)
	// Output:
	// foreign <nil>
	// claimed <nil>
	// dead letter: orders/0@0 legacy 7
}
