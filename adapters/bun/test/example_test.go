package bunoutbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/sqlitedialect"
	"github.com/uptrace/bun/migrate"

	bunoutbox "github.com/outboxer-go/outboxer/adapters/bun"
	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest" // registers the SQLite driver, modernc.org/sqlite
)

type OrderPlaced struct {
	OrderID int64 `json:"order_id"`
}

func (OrderPlaced) Outbox() string { return "orders" }

func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "bunoutbox")
	defer os.RemoveAll(dir)
	pool, _ := sql.Open("sqlite", dbtest.SQLiteDSN(filepath.Join(dir, "shop.db")))
	db := bun.NewDB(pool, sqlitedialect.New())
	defer db.Close()

	// The outbox tables as a bun migration, beside your own.
	ms := migrate.NewMigrations()
	bunoutbox.AddMigration(ms, "20250101000000", core.MigrateOptions{})
	migrator := migrate.NewMigrator(db, ms)
	_ = migrator.Init(ctx)
	_, _ = migrator.Migrate(ctx)
	_, _ = db.NewCreateTable().Model((*Order)(nil)).Exec(ctx)

	ob, _ := core.New(core.Config{DB: pool, Manual: true, Outboxes: map[string]core.OutboxConfig{
		"orders": {Relay: core.RelayFunc(func(_ context.Context, batch []core.Envelope) error {
			for _, e := range batch {
				fmt.Printf("relayed %s %s\n", e.GroupKey, e.Payload)
			}
			return nil
		})},
	}})

	err := bunoutbox.InTx(ctx, ob, db, func(ctx context.Context, tx bun.Tx, p *core.TxPublisher) error {
		order := &Order{ID: 42, Note: "two books"}
		if _, err := tx.NewInsert().Model(order).Exec(ctx); err != nil {
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
