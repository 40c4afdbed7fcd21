// CloudEvents: orders on embedded SQLite, their events relayed to Kafka as CloudEvents.
//
// The Kafka relay's CloudEvents option makes every record a CloudEvent 1.0 in the Kafka
// binding's binary content mode: the payload stays the record's value, and the
// attributes are ce_ headers that any CloudEvents SDK's Kafka binding reads. The id is
// the message key, the same on every delivery of a row, so a consumer deduplicates on
// it. The Kafka cluster runs inside the program (franz-go's kfake), so nothing needs to
// be installed.
//
//	go run ./examples/cloudevents
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
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	_ "modernc.org/sqlite"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/sinks/kafka"
)

// OrderPlaced is the event; its type is the CloudEvent's type and its group key the
// subject (and the record key, so one order's events stay in sequence).
type OrderPlaced struct {
	OrderID int     `json:"order_id"`
	Total   float64 `json:"total"`
}

func (OrderPlaced) Outbox() string      { return "orders" }
func (OrderPlaced) MessageType() string { return "com.example.shop.OrderPlaced" }
func (e OrderPlaced) GroupKey() string  { return fmt.Sprintf("order:%d", e.OrderID) }

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, out io.Writer) error {
	cluster, err := kfake.NewCluster(kfake.SeedTopics(1, "orders"))
	if err != nil {
		return err
	}
	defer cluster.Close()

	dir, err := os.MkdirTemp("", "outboxer-cloudevents")
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

	relay, err := kafka.New(kafka.Config{Brokers: cluster.ListenAddrs(), Topic: "orders",
		// Source names the outbox; set Structured to send the JSON event as the value.
		CloudEvents: &kafka.CloudEvents{Source: "https://shop.example.com/orders"}})
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
	for _, o := range []OrderPlaced{{1, 25.50}, {2, 99.00}} {
		err := ob.InTx(ctx, db, func(tx *sql.Tx, p *core.TxPublisher) error {
			_, err := p.Publish(ctx, o)
			return err
		})
		if err != nil {
			return err
		}
	}

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
	for len(records) < 2 {
		fetches := consumer.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		fetches.EachRecord(func(r *kgo.Record) { records = append(records, r) })
	}
	slices.SortFunc(records, func(a, b *kgo.Record) int { return cmp.Compare(a.Offset, b.Offset) })
	for _, r := range records {
		fmt.Fprintf(out, "record key %s value %s\n", r.Key, r.Value)
		for _, h := range r.Headers {
			v := string(h.Value)
			if h.Key == "ce_time" {
				// The creation time differs on every run; show that it is RFC 3339.
				if _, err := time.Parse(time.RFC3339Nano, v); err != nil {
					return fmt.Errorf("ce_time %q: %w", v, err)
				}
				v = "<created at, RFC 3339>"
			}
			if strings.HasPrefix(h.Key, kafka.HeaderCloudEventsPrefix) || h.Key == kafka.HeaderContentType {
				fmt.Fprintf(out, "  %s: %s\n", h.Key, v)
			}
		}
	}
	return nil
}
