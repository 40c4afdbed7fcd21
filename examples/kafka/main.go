// Kafka: orders on embedded SQLite, their events relayed to a Kafka topic.
//
// The Kafka cluster runs inside the program (franz-go's kfake), so nothing needs to be
// installed; point Brokers at your own cluster to use a real one. The program publishes
// three events in the transactions of their orders, runs the relay until they are
// delivered, then reads the topic back as a consumer would.
//
//	go run ./examples/kafka
package main

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	_ "modernc.org/sqlite"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/sinks/kafka"
)

// OrderPlaced is the event; the group key (the Kafka record key) keeps one order's
// events in sequence.
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
	cluster, err := kfake.NewCluster(kfake.SeedTopics(3, "orders"))
	if err != nil {
		return err
	}
	defer cluster.Close()

	dir, err := os.MkdirTemp("", "outboxer-kafka")
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

	relay, err := kafka.New(kafka.Config{Brokers: cluster.ListenAddrs(), Topic: "orders"})
	if err != nil {
		return err
	}
	ob, err := core.New(core.Config{
		DB:       db,
		Logger:   slog.New(slog.DiscardHandler),
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: relay, PollInterval: 50 * time.Millisecond}},
	})
	if err != nil {
		return err
	}

	for _, o := range []OrderPlaced{{1, 25.50}, {2, 99.00}, {3, 12.75}} {
		err := ob.InTx(ctx, db, func(tx *sql.Tx, p *core.TxPublisher) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, total) VALUES (?, ?)`, o.OrderID, o.Total); err != nil {
				return err
			}
			_, err := p.Publish(ctx, o)
			return err
		})
		if err != nil {
			return err
		}
	}

	// Run relays until the context ends; it closes the relay when it returns.
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ob.Run(runCtx) }()
	for {
		c, err := ob.Counts(ctx, "orders")
		if err != nil {
			stop()
			return err
		}
		if c.Pending == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		return err
	}

	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer consumer.Close()
	var records []*kgo.Record
	for len(records) < 3 {
		fetches := consumer.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		fetches.EachRecord(func(r *kgo.Record) { records = append(records, r) })
	}
	// Kafka orders records within a partition only; print them by partition and offset so
	// that the output is the same on every run.
	slices.SortFunc(records, func(a, b *kgo.Record) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})
	for _, r := range records {
		headers := map[string]string{}
		for _, h := range r.Headers {
			headers[h.Key] = string(h.Value)
		}
		fmt.Fprintf(out, "partition %d offset %d key %s id %s type %s value %s\n", r.Partition, r.Offset, r.Key,
			headers[kafka.HeaderID], headers[kafka.HeaderType], r.Value)
	}
	return nil
}
