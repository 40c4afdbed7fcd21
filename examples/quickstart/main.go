// Quickstart: an order service on embedded SQLite, no server needed.
//
// It publishes an OrderPlaced event in the same transaction as each order, rolls one
// transaction back (its event vanishes with it), then runs the relay, which prints each
// event as it delivers it, and shows the counts before and after.
//
//	go run ./examples/quickstart
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

// OrderPlaced is the event. Its group key keeps the events of one order in sequence.
type OrderPlaced struct {
	OrderID int     `json:"order_id"`
	Total   float64 `json:"total"`
}

func (OrderPlaced) Outbox() string     { return "orders" }
func (e OrderPlaced) GroupKey() string { return fmt.Sprintf("order:%d", e.OrderID) }

// printer is the sink: it prints what it delivers.
type printer struct{ w io.Writer }

func (p printer) Deliver(_ context.Context, batch []core.Envelope) error {
	for _, e := range batch {
		fmt.Fprintf(p.w, "  delivered #%d %s %s %s\n", e.ID, e.Type, e.GroupKey, e.Payload)
	}
	return nil
}

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, out io.Writer) error {
	dir, err := os.MkdirTemp("", "outboxer-quickstart")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return err
	}
	defer db.Close()

	// 1. The business table and the outbox table.
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL NOT NULL)`); err != nil {
		return err
	}
	if err := core.Migrate(ctx, db, core.MigrateOptions{}); err != nil {
		return err
	}

	// 2. The instance: one outbox, relayed by the printer.
	ob, err := core.New(core.Config{
		DB:     db,
		Logger: slog.New(slog.DiscardHandler),
		Outboxes: map[string]core.OutboxConfig{
			"orders": {Relay: printer{out}, PollInterval: 50 * time.Millisecond},
		},
	})
	if err != nil {
		return err
	}

	// 3. Business writes and events commit together, or not at all.
	for _, o := range []OrderPlaced{{1, 25.50}, {2, 99.00}, {3, 12.75}} {
		err := ob.InTx(ctx, db, func(tx *sql.Tx, p *core.TxPublisher) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, total) VALUES (?, ?)`, o.OrderID, o.Total); err != nil {
				return err
			}
			if _, err := p.Publish(ctx, o); err != nil {
				return err
			}
			if o.OrderID == 2 {
				return errors.New("payment declined") // rolls back the order and its event
			}
			return nil
		})
		fmt.Fprintf(out, "order %d: %v\n", o.OrderID, orOK(err))
	}
	before, err := ob.Counts(ctx, "orders")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "before relaying: %d pending\n", before.Pending)

	// 4. The relay: Run delivers until the context ends.
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
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		return err
	}
	after, err := ob.Counts(ctx, "orders")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "after relaying: %d pending, %d dead\n", after.Pending, after.Dead)
	return nil
}

func orOK(err error) string {
	if err != nil {
		return "rolled back (" + err.Error() + ")"
	}
	return "committed"
}
