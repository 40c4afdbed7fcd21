// Inbox: an order service and a billing service, effectively once end to end.
//
// The order service writes orders and their events in one transaction (the outbox) on
// its SQLite database; the relay delivers the events to a Kafka topic at least once.
// The billing service consumes the topic with the inbox on its own SQLite database:
// each record's invoice is written in a transaction that first claims the record's key
// (outboxer-key), and offsets are committed after it. Here the first billing instance
// invoices the first orders and dies before committing its offsets, so Kafka hands the
// same records to the second instance: the inbox skips them, and every order is
// invoiced exactly once.
//
// The Kafka cluster runs inside the program (franz-go's kfake); nothing needs to be
// installed.
//
//	go run ./examples/inbox
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	_ "modernc.org/sqlite"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/inbox"
	"github.com/outboxer-go/outboxer/sinks/kafka"
)

// OrderPlaced is the order service's event.
type OrderPlaced struct {
	OrderID int   `json:"order_id"`
	Cents   int64 `json:"cents"`
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

func openSQLite(dir, name string) (*sql.DB, error) {
	return sql.Open("sqlite", "file:"+filepath.Join(dir, name)+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
}

func run(ctx context.Context, out io.Writer) error {
	cluster, err := kfake.NewCluster(kfake.SeedTopics(3, "orders"))
	if err != nil {
		return err
	}
	defer cluster.Close()
	dir, err := os.MkdirTemp("", "outboxer-inbox")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	shop, err := newShop(ctx, dir, cluster.ListenAddrs())
	if err != nil {
		return err
	}
	defer shop.db.Close()
	billing, err := newBilling(ctx, dir)
	if err != nil {
		return err
	}
	defer billing.db.Close()

	// The order service takes five orders and relays their events.
	for id := 1; id <= 5; id++ {
		if err := shop.placeOrder(ctx, OrderPlaced{OrderID: id, Cents: int64(id) * 1000}); err != nil {
			return err
		}
	}
	if err := shop.relayAll(ctx); err != nil {
		return err
	}

	// Billing instance 1 invoices the five orders, then dies before committing offsets.
	first, err := billing.instance(cluster.ListenAddrs())
	if err != nil {
		return err
	}
	for handled := 0; handled < 5; {
		fs := first.client.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		for _, rec := range fs.Records() {
			if _, err := first.consumer.HandleRecord(ctx, rec); err != nil {
				return err
			}
			handled++
		}
	}
	first.client.Close() // killed: no offset committed
	fmt.Fprintf(out, "billing-1: invoiced %d orders, died before committing its offsets\n", billing.runs)

	// Two more orders; billing instance 2 starts from the last committed offsets (none),
	// so it receives all seven records.
	for id := 6; id <= 7; id++ {
		if err := shop.placeOrder(ctx, OrderPlaced{OrderID: id, Cents: int64(id) * 1000}); err != nil {
			return err
		}
	}
	if err := shop.relayAll(ctx); err != nil {
		return err
	}
	second, err := billing.instance(cluster.ListenAddrs())
	if err != nil {
		return err
	}
	defer second.client.Close()
	// A service calls second.consumer.Run(ctx), which does this for every fetch; here
	// the loop counts what the inbox found.
	outcomes := map[inbox.Outcome]int{}
	for received := 0; received < 7; {
		fs := second.client.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		for _, rec := range fs.Records() {
			o, err := second.consumer.HandleRecord(ctx, rec)
			if err != nil {
				return err
			}
			outcomes[o]++
			received++
		}
		if err := second.client.CommitRecords(ctx, fs.Records()...); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "billing-2: received all 7 records: %d claimed and invoiced, %d duplicates skipped\n",
		outcomes[inbox.Claimed], outcomes[inbox.Duplicate])

	inv, err := billing.invoices(ctx)
	if err != nil {
		return err
	}
	for id := 1; id <= 7; id++ {
		fmt.Fprintf(out, "order %d: %d invoice(s)\n", id, inv[id])
	}
	return nil
}

// shop is the order service: orders and the outbox in one database.
type shop struct {
	db *sql.DB
	ob *core.Outboxer
}

func newShop(ctx context.Context, dir string, brokers []string) (*shop, error) {
	db, err := openSQLite(dir, "shop.db")
	if err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, cents INTEGER NOT NULL)`); err != nil {
		return nil, err
	}
	if err := core.Migrate(ctx, db, core.MigrateOptions{}); err != nil {
		return nil, err
	}
	// Source names the shop's database in every record's key, so that keys stay unique
	// if other databases' outboxes feed the same consumers.
	relay, err := kafka.New(kafka.Config{Brokers: brokers, Topic: "orders", Source: "shop"})
	if err != nil {
		return nil, err
	}
	ob, err := core.New(core.Config{
		DB:       db,
		Manual:   true, // relayAll drains; a service would Run the relay instead
		Logger:   slog.New(slog.DiscardHandler),
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: relay, PollInterval: 50 * time.Millisecond}},
	})
	if err != nil {
		return nil, err
	}
	return &shop{db: db, ob: ob}, nil
}

func (s *shop) placeOrder(ctx context.Context, o OrderPlaced) error {
	return s.ob.InTx(ctx, s.db, func(tx *sql.Tx, p *core.TxPublisher) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, cents) VALUES (?, ?)`, o.OrderID, o.Cents); err != nil {
			return err
		}
		_, err := p.Publish(ctx, o)
		return err
	})
}

// relayAll delivers every pending event (Drain: what Run does in the background).
func (s *shop) relayAll(ctx context.Context) error {
	res, err := s.ob.Drain(ctx, "orders")
	if err != nil {
		return err
	}
	if res.Failed+res.Dead > 0 {
		return fmt.Errorf("relay: %+v", res)
	}
	return nil
}

// billing is the billing service: invoices and the inbox in its own database.
type billing struct {
	db   *sql.DB
	in   *inbox.Inbox
	runs int // handler runs that committed (one goroutine handles at a time here)
}

func newBilling(ctx context.Context, dir string) (*billing, error) {
	db, err := openSQLite(dir, "billing.db")
	if err != nil {
		return nil, err
	}
	in, err := inbox.New(inbox.Config{DB: db})
	if err != nil {
		return nil, err
	}
	if err := in.Migrate(ctx); err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE invoices (order_id INTEGER NOT NULL, cents INTEGER NOT NULL)`); err != nil {
		return nil, err
	}
	return &billing{db: db, in: in}, nil
}

type instance struct {
	client   *kgo.Client
	consumer *kafka.Consumer
}

// instance starts a billing consumer in the "billing" group.
func (b *billing) instance(brokers []string) (*instance, error) {
	client, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup("billing"), kgo.ConsumeTopics("orders"),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	consumer, err := kafka.NewConsumer(kafka.ConsumerConfig{Client: client, Inbox: b.in, Name: "billing", Handler: b.invoice})
	if err != nil {
		client.Close()
		return nil, err
	}
	return &instance{client: client, consumer: consumer}, nil
}

// invoice is the handler: it writes in the inbox's transaction.
func (b *billing) invoice(ctx context.Context, tx *sql.Tx, rec *kgo.Record, _ inbox.Outcome) error {
	var o OrderPlaced
	if err := json.Unmarshal(rec.Value, &o); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO invoices (order_id, cents) VALUES (?, ?)`, o.OrderID, o.Cents); err != nil {
		return err
	}
	b.runs++ // counted before the commit; a failed commit would make the example stop
	return nil
}

// invoices returns how many invoices each order has.
func (b *billing) invoices(ctx context.Context) (map[int]int, error) {
	rows, err := b.db.QueryContext(ctx, `SELECT order_id, count(*) FROM invoices GROUP BY order_id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int]int{}
	for rows.Next() {
		var id, n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[id] = n
	}
	return out, rows.Err()
}
