// gorm: an order service on GORM and embedded SQLite, no server needed.
//
// Each order and its OrderPlaced event are written in one GORM transaction through
// gormoutbox.InTx: a declined payment rolls back both, and a failed nested Transaction
// (a savepoint) drops only what was written inside it. Then the relay delivers what
// committed. GORM runs on a modernc.org/sqlite pool (pure Go) through
// gorm.io/driver/sqlite's Conn.
//
//	go run ./gorm
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

	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	_ "modernc.org/sqlite"

	gormoutbox "github.com/outboxer-go/outboxer/adapters/gorm"
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
	ID      int64 `gorm:"primaryKey;autoIncrement:false"`
	Wrapped bool
}

func run(ctx context.Context, out io.Writer) error {
	dir, err := os.MkdirTemp("", "outboxer-gorm")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	pool, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return err
	}
	defer pool.Close()
	db, err := gorm.Open(sqlite.New(sqlite.Config{Conn: pool}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return err
	}
	if err := db.AutoMigrate(&Order{}); err != nil {
		return err
	}
	if err := gormoutbox.Migrate(ctx, db, core.MigrateOptions{}); err != nil {
		return err
	}
	ob, err := core.New(core.Config{DB: pool, Logger: slog.New(slog.DiscardHandler),
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: printer{out}, PollInterval: time.Second}}})
	if err != nil {
		return err
	}

	for id := int64(1); id <= 3; id++ {
		err := gormoutbox.InTx(ctx, ob, db, func(tx *gorm.DB, p *core.TxPublisher) error {
			if err := tx.Create(&Order{ID: id}).Error; err != nil {
				return err
			}
			if _, err := p.Publish(ctx, OrderPlaced{OrderID: id}); err != nil {
				return err
			}
			if id == 2 {
				return errors.New("payment declined") // the order and its event are rolled back
			}
			// Gift wrapping is optional: a nested transaction is a savepoint in GORM, so
			// if it fails only its update and its event go.
			err := gormoutbox.InTx(ctx, ob, tx, func(tx *gorm.DB, p *core.TxPublisher) error {
				if err := tx.Model(&Order{ID: id}).Update("wrapped", true).Error; err != nil {
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
