// bun: an order service on bun and embedded SQLite, no server needed.
//
// Each order and its OrderPlaced event are written in one bun.Tx through bunoutbox.InTx:
// a declined payment rolls back both, and a failed RunInTx inside the transaction (a
// savepoint) drops only what was written inside it. The outbox tables come from a bun
// migration. Then the relay delivers what committed.
//
//	go run ./bun
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

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/sqlitedialect"
	"github.com/uptrace/bun/migrate"
	_ "modernc.org/sqlite"

	bunoutbox "github.com/outboxer-go/outboxer/adapters/bun"
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

// Order is the business row.
type Order struct {
	bun.BaseModel `bun:"table:orders"`
	ID            int64 `bun:"id,pk"`
	Wrapped       bool  `bun:"wrapped,notnull"`
}

func run(ctx context.Context, out io.Writer) error {
	dir, err := os.MkdirTemp("", "outboxer-bun")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	pool, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return err
	}
	db := bun.NewDB(pool, sqlitedialect.New())
	defer db.Close()

	// The outbox tables as a bun migration, beside the application's own.
	migrations := migrate.NewMigrations()
	bunoutbox.AddMigration(migrations, "20250101000000", core.MigrateOptions{})
	migrator := migrate.NewMigrator(db, migrations)
	if err := migrator.Init(ctx); err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx); err != nil {
		return err
	}
	if _, err := db.NewCreateTable().Model((*Order)(nil)).Exec(ctx); err != nil {
		return err
	}
	ob, err := core.New(core.Config{DB: pool, Logger: slog.New(slog.DiscardHandler),
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: printer{out}, PollInterval: time.Second}}})
	if err != nil {
		return err
	}

	for id := int64(1); id <= 3; id++ {
		err := bunoutbox.InTx(ctx, ob, db, func(ctx context.Context, tx bun.Tx, p *core.TxPublisher) error {
			if _, err := tx.NewInsert().Model(&Order{ID: id}).Exec(ctx); err != nil {
				return err
			}
			if _, err := p.Publish(ctx, OrderPlaced{OrderID: id}); err != nil {
				return err
			}
			if id == 2 {
				return errors.New("payment declined") // the order and its event are rolled back
			}
			// Gift wrapping is optional: RunInTx on a bun.Tx is a savepoint, so if it
			// fails only its update and its event go.
			err := bunoutbox.InTx(ctx, ob, tx, func(ctx context.Context, tx bun.Tx, p *core.TxPublisher) error {
				if _, err := tx.NewUpdate().Model(&Order{ID: id, Wrapped: true}).Column("wrapped").WherePK().Exec(ctx); err != nil {
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
