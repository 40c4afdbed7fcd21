// ent: an order service on ent and embedded SQLite, no server needed.
//
// An ent hook publishes OrderPlaced for every created order, in the order's own
// transaction; entoutbox.InTx runs each order in a transaction: a declined payment rolls
// back the order and its event. ent has no nested transactions, so the optional gift
// wrapping runs in entoutbox.Savepoint: if it fails, only its update and its event go.
// Then the relay delivers what committed.
//
// The ent code in ./ent is generated with the sql/execquery feature (go generate ./ent).
// It is a module of its own only because the ent adapter's tests share it; in your
// service it is a package of your module.
//
//	go run ./ent
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

	entgo "entgo.io/ent"
	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	_ "modernc.org/sqlite"

	entoutbox "github.com/outboxer-go/outboxer/adapters/ent"
	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/examples/ent/ent"
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

// placed is the hook's rule: a created order publishes OrderPlaced.
func placed(_ context.Context, m entgo.Mutation, v entgo.Value) ([]core.Message, error) {
	if o, ok := v.(*ent.Order); ok && m.Op().Is(entgo.OpCreate) {
		return []core.Message{OrderPlaced{OrderID: o.ID}}, nil
	}
	return nil, nil
}

func run(ctx context.Context, out io.Writer) error {
	dir, err := os.MkdirTemp("", "outboxer-ent")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	pool, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_txlock=immediate")
	if err != nil {
		return err
	}
	defer pool.Close()
	client := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.SQLite, pool)))
	if err := client.Schema.Create(ctx); err != nil {
		return err
	}
	if err := core.Migrate(ctx, pool, core.MigrateOptions{}); err != nil {
		return err
	}
	ob, err := core.New(core.Config{DB: pool, Logger: slog.New(slog.DiscardHandler),
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: printer{out}, PollInterval: time.Second}}})
	if err != nil {
		return err
	}
	client.Order.Use(entoutbox.Hook[*ent.Tx](ob, placed))

	for id := int64(1); id <= 3; id++ {
		err := entoutbox.InTx(ctx, ob, client.Tx, func(ctx context.Context, tx *ent.Tx, p *core.TxPublisher) error {
			// The hook publishes OrderPlaced in this transaction.
			if err := tx.Order.Create().SetID(id).SetNote("two books").Exec(ctx); err != nil {
				return err
			}
			if id == 2 {
				return errors.New("payment declined") // the order and its event are rolled back
			}
			err := entoutbox.Savepoint(ctx, tx, "gift_wrap", func() error {
				if err := tx.Order.UpdateOneID(id).SetNote("two books, gift-wrapped").Exec(ctx); err != nil {
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
