// pgx: an order service on pgx v5 alone (no database/sql in the business code), against
// PostgreSQL: OUTBOXER_EXAMPLE_POSTGRES, or postgres://postgres@127.0.0.1:5432/test. It
// works in a schema of its own, dropped at the end.
//
// Each order and its OrderPlaced event are written in one pgx.Tx through pgxoutbox.InTx:
// a declined payment rolls back both, and a failed nested InTx (tx.Begin: a savepoint)
// drops only what was written inside it. The instance runs over the same pool through
// pgx's stdlib. Then the relay delivers what committed.
//
//	go run ./pgx
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	pgxoutbox "github.com/outboxer-go/outboxer/adapters/pgx"
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

// postgresURL is the server the example uses.
func postgresURL() string {
	return cmp.Or(os.Getenv("OUTBOXER_EXAMPLE_POSTGRES"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
}

func run(ctx context.Context, out io.Writer) error {
	cfg, err := pgxpool.ParseConfig(postgresURL())
	if err != nil {
		return err
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	schema := "outboxer_example_" + hex.EncodeToString(b)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		return err
	}
	defer pool.Exec(context.WithoutCancel(ctx), `DROP SCHEMA `+schema+` CASCADE`)
	if _, err := pool.Exec(ctx, `CREATE TABLE orders (id bigint PRIMARY KEY, wrapped boolean NOT NULL DEFAULT false)`); err != nil {
		return err
	}
	if err := pgxoutbox.Migrate(ctx, pool, core.MigrateOptions{}); err != nil {
		return err
	}
	sqlDB := stdlib.OpenDBFromPool(pool)
	defer sqlDB.Close()
	ob, err := core.New(core.Config{DB: sqlDB, Logger: slog.New(slog.DiscardHandler),
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: printer{out}, PollInterval: time.Second}}})
	if err != nil {
		return err
	}

	for id := int64(1); id <= 3; id++ {
		err := pgxoutbox.InTx(ctx, ob, pool, func(ctx context.Context, tx pgx.Tx, p *core.TxPublisher) error {
			if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, id); err != nil {
				return err
			}
			if _, err := p.Publish(ctx, OrderPlaced{OrderID: id}); err != nil {
				return err
			}
			if id == 2 {
				return errors.New("payment declined") // the order and its event are rolled back
			}
			// Gift wrapping is optional: InTx on a pgx.Tx is a savepoint, so if it fails
			// only its update and its event go.
			err := pgxoutbox.InTx(ctx, ob, tx, func(ctx context.Context, tx pgx.Tx, p *core.TxPublisher) error {
				if _, err := tx.Exec(ctx, `UPDATE orders SET wrapped = true WHERE id = $1`, id); err != nil {
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
