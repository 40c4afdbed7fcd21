package gormoutbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	gormoutbox "github.com/outboxer-go/outboxer/adapters/gorm"
	"github.com/outboxer-go/outboxer/core"
)

// The examples run on SQLite through gorm.io/driver/sqlite (mattn/go-sqlite3, cgo): the
// driver gorm's own go.mod already requires, so that these examples add no module to the
// build list of a program using this adapter.

type OrderPlaced struct {
	OrderID int64 `json:"order_id"`
}

func (OrderPlaced) Outbox() string { return "orders" }

type Order struct {
	ID   int64 `gorm:"primaryKey;autoIncrement:false"`
	Note string
}

func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "gormoutbox")
	defer os.RemoveAll(dir)
	dsn := "file:" + filepath.ToSlash(filepath.Join(dir, "shop.db")) + "?_journal_mode=WAL&_txlock=immediate"
	db, _ := gorm.Open(sqlite.Open(dsn), &gorm.Config{Logger: logger.Discard})
	pool, _ := db.DB()
	defer pool.Close()
	_ = db.AutoMigrate(&Order{})
	_ = gormoutbox.Migrate(ctx, db, core.MigrateOptions{})

	ob, _ := core.New(core.Config{DB: pool, Manual: true, Outboxes: map[string]core.OutboxConfig{
		"orders": {Relay: core.RelayFunc(func(_ context.Context, batch []core.Envelope) error {
			for _, e := range batch {
				fmt.Printf("relayed %s %s\n", e.GroupKey, e.Payload)
			}
			return nil
		})},
	}})

	err := gormoutbox.InTx(ctx, ob, db, func(tx *gorm.DB, p *core.TxPublisher) error {
		order := Order{ID: 42, Note: "two books"}
		if err := tx.Create(&order).Error; err != nil {
			return err
		}
		_, err := p.Publish(ctx, OrderPlaced{OrderID: order.ID}, core.WithGroupKey("order:42"))
		return err
	})
	fmt.Println("committed:", err == nil)
	res, _ := ob.Drain(ctx, "orders")
	fmt.Println("delivered:", res.Delivered)
	// Output:
	// committed: true
	// relayed order:42 {"order_id":42}
	// delivered: 1
}

func ExamplePublish() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "gormoutbox")
	defer os.RemoveAll(dir)
	dsn := "file:" + filepath.ToSlash(filepath.Join(dir, "shop.db")) + "?_journal_mode=WAL&_txlock=immediate"
	db, _ := gorm.Open(sqlite.Open(dsn), &gorm.Config{Logger: logger.Discard})
	pool, _ := db.DB()
	defer pool.Close()
	_ = db.AutoMigrate(&Order{})
	_ = gormoutbox.Migrate(ctx, db, core.MigrateOptions{})
	ob, _ := core.New(core.Config{DB: pool, PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {}}})

	err := db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&Order{ID: 7, Note: "refused"}).Error; err != nil {
			return err
		}
		if _, err := gormoutbox.Publish(ctx, ob, tx, OrderPlaced{OrderID: 7}); err != nil {
			return err
		}
		return fmt.Errorf("out of stock")
	})
	c, _ := ob.Counts(ctx, "orders")
	fmt.Println(err, "- messages stored:", c.Pending)
	// Output:
	// out of stock - messages stored: 0
}
