// sqlx: an order service on sqlx and embedded SQLite, no server needed.
//
// Each order and its OrderPlaced event are written in one *sqlx.Tx through
// sqlxoutbox.InTx: a declined payment rolls back both, and a failed savepoint drops only
// what was written inside it. Then the relay delivers what committed.
//
//	go run ./sqlx
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/jmoiron/sqlx"
	_ "modernc.org/sqlite"

	sqlxoutbox "github.com/outboxer-go/outboxer/adapters/sqlx"
	"github.com/outboxer-go/outboxer/core"
)

// OrderPlaced is the event; GiftWrapped follows it in the same group.
type OrderPlaced struct {
	OrderID int64 `json:"order_id"`
}

func (OrderPlaced) Outbox() string     { return "orders" }
func (e OrderPlaced) GroupKey() string { return fmt.Sprint("order:", e.OrderID) }

type GiftWrapped struct {
	OrderID int64 `json:"order_id"`
}

func (GiftWrapped) Outbox() string     { return "orders" }
func (e GiftWrapped) GroupKey() string { return fmt.Sprint("order:", e.OrderID) }

type printer struct{ w io.Writer }

func (p printer) Deliver(_ context.Context, batch []core.Envelope) error {
	for _, e := range batch {
		fmt.Fprintf(p.w, "  delivered %s %s %s\n", e.Type, e.GroupKey, e.Payload)
	}
	return nil
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, out io.Writer) error {
	dir, err := os.MkdirTemp("", "outboxer-sqlx")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := sqlx.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, wrapped INTEGER NOT NULL DEFAULT 0)`); err != nil {
		return err
	}
	if err := sqlxoutbox.Migrate(ctx, db, core.MigrateOptions{}); err != nil {
		return err
	}
	ob, err := core.New(core.Config{DB: db.DB, Logger: slog.New(slog.DiscardHandler),
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: printer{out}, PollInterval: time.Second}}})
	if err != nil {
		return err
	}

	for id := int64(1); id <= 3; id++ {
		err := sqlxoutbox.InTx(ctx, ob, db, nil, func(tx *sqlx.Tx, p *core.TxPublisher) error {
			if _, err := tx.NamedExecContext(ctx, `INSERT INTO orders (id) VALUES (:id)`, map[string]any{"id": id}); err != nil {
				return err
			}
			if _, err := p.Publish(ctx, OrderPlaced{OrderID: id}); err != nil {
				return err
			}
			if id == 2 {
				return errors.New("payment declined") // the order and its event are rolled back
			}
			// Gift wrapping is optional: if it fails, only its row and event go.
			err := sqlxoutbox.Savepoint(ctx, tx, "gift_wrap", func() error {
				if _, err := tx.ExecContext(ctx, `UPDATE orders SET wrapped = 1 WHERE id = ?`, id); err != nil {
					return err
				}
				if _, err := p.Publish(ctx, GiftWrapped{OrderID: id}); err != nil {
					return err
				}
				if id == 3 {
					return errors.New("out of gift paper")
				}
				return nil
			})
			if err != nil {
				fmt.Fprintf(out, "order %d: no gift wrap (%v)\n", id, err)
			}
			return nil
		})
		fmt.Fprintf(out, "order %d: %s\n", id, outcome(err))
	}
	return deliver(ctx, ob, out)
}

func outcome(err error) string {
	if err != nil {
		return "rolled back: " + err.Error()
	}
	return "committed"
}

// deliver runs the relay until the outbox is empty.
func deliver(ctx context.Context, ob *core.Outboxer, out io.Writer) error {
	c, err := ob.Counts(ctx, "orders")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "relaying %d events:\n", c.Pending)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ob.Run(runCtx) }()
	defer func() { stop(); <-done }()
	for c.Pending > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if c, err = ob.Counts(ctx, "orders"); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "all delivered")
	return nil
}
