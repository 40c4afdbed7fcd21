package sqlxoutbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/jmoiron/sqlx"
	_ "github.com/mattn/go-sqlite3" // the SQLite driver sqlx's own go.mod requires (cgo)

	sqlxoutbox "github.com/outboxer-go/outboxer/adapters/sqlx"
	"github.com/outboxer-go/outboxer/core"
)

// The examples run on SQLite through mattn/go-sqlite3, which sqlx's own go.mod already
// requires, so that they add no module to the build list of a program using this adapter.

type OrderPlaced struct {
	OrderID int64 `json:"order_id"`
}

func (OrderPlaced) Outbox() string { return "orders" }

func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "sqlxoutbox")
	defer os.RemoveAll(dir)
	db := sqlx.MustOpen("sqlite3", "file:"+filepath.ToSlash(filepath.Join(dir, "shop.db"))+"?_journal_mode=WAL&_txlock=immediate")
	defer db.Close()
	_ = sqlxoutbox.Migrate(ctx, db, core.MigrateOptions{Dialect: core.SQLite})
	db.MustExec(`CREATE TABLE orders (id INTEGER PRIMARY KEY, note TEXT NOT NULL)`)

	ob, _ := core.New(core.Config{DB: db.DB, Manual: true, Outboxes: map[string]core.OutboxConfig{
		"orders": {Relay: core.RelayFunc(func(_ context.Context, batch []core.Envelope) error {
			for _, e := range batch {
				fmt.Printf("relayed %s %s\n", e.Type, e.Payload)
			}
			return nil
		})},
	}})

	err := sqlxoutbox.InTx(ctx, ob, db, nil, func(tx *sqlx.Tx, p *core.TxPublisher) error {
		if _, err := tx.NamedExecContext(ctx, `INSERT INTO orders (id, note) VALUES (:id, :note)`,
			map[string]any{"id": 42, "note": "two books"}); err != nil {
			return err
		}
		_, err := p.Publish(ctx, OrderPlaced{OrderID: 42}, core.WithGroupKey("order:42"))
		return err
	})
	fmt.Println("committed:", err == nil)
	res, _ := ob.Drain(ctx, "orders")
	fmt.Println("delivered:", res.Delivered)
	// Output:
	// committed: true
	// relayed sqlxoutbox_test.OrderPlaced {"order_id":42}
	// delivered: 1
}

func ExampleSavepoint() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "sqlxoutbox")
	defer os.RemoveAll(dir)
	db := sqlx.MustOpen("sqlite3", "file:"+filepath.ToSlash(filepath.Join(dir, "shop.db"))+"?_journal_mode=WAL&_txlock=immediate")
	defer db.Close()
	_ = sqlxoutbox.Migrate(ctx, db, core.MigrateOptions{Dialect: core.SQLite})
	ob, _ := core.New(core.Config{DB: db.DB, PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {}}})

	_ = sqlxoutbox.InTx(ctx, ob, db, nil, func(tx *sqlx.Tx, p *core.TxPublisher) error {
		_, _ = p.Publish(ctx, OrderPlaced{OrderID: 1})
		err := sqlxoutbox.Savepoint(ctx, tx, "gift_wrap", func() error {
			_, _ = p.Publish(ctx, OrderPlaced{OrderID: 2})
			return fmt.Errorf("no gift wrap today")
		})
		fmt.Println("savepoint:", err)
		return nil
	})
	c, _ := ob.Counts(ctx, "orders")
	fmt.Println("stored:", c.Pending)
	// Output:
	// savepoint: no gift wrap today
	// stored: 1
}
