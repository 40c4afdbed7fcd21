package entoutbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	_ "github.com/mattn/go-sqlite3" // the SQLite driver ent's own go.mod requires (cgo)

	entoutbox "github.com/outboxer-go/outboxer/adapters/ent"
	"github.com/outboxer-go/outboxer/core"
)

type OrderPlaced struct {
	OrderID int64 `json:"order_id"`
}

func (OrderPlaced) Outbox() string { return "orders" }

// InTx and Publish take ent's generated client.Tx and *ent.Tx (generated with
// sql/execquery, see the package documentation). So that it runs without generated code,
// this example uses the ent SQL driver beneath them, whose transaction has the same
// ExecContext, QueryContext, Commit and Rollback. It runs on SQLite through
// mattn/go-sqlite3, which ent's own go.mod already requires: it adds no module to the
// build list of a program using this adapter.
func ExampleInTx() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "entoutbox")
	defer os.RemoveAll(dir)
	pool, _ := sql.Open("sqlite3", "file:"+filepath.ToSlash(filepath.Join(dir, "shop.db"))+"?_journal_mode=WAL&_txlock=immediate")
	defer pool.Close()
	_ = core.Migrate(ctx, pool, core.MigrateOptions{})
	_, _ = pool.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, note TEXT NOT NULL)`)
	ob, _ := core.New(core.Config{DB: pool, Manual: true, Outboxes: map[string]core.OutboxConfig{
		"orders": {Relay: core.RelayFunc(func(_ context.Context, batch []core.Envelope) error {
			for _, e := range batch {
				fmt.Printf("relayed %s\n", e.Payload)
			}
			return nil
		})},
	}})

	drv := entsql.OpenDB(dialect.SQLite, pool) // with generated code: client.Tx
	begin := func(ctx context.Context) (*entsql.Tx, error) {
		tx, err := drv.Tx(ctx)
		if err != nil {
			return nil, err
		}
		return tx.(*entsql.Tx), nil
	}
	for _, id := range []int64{1, 2} {
		err := entoutbox.InTx(ctx, ob, begin, func(ctx context.Context, tx *entsql.Tx, p *core.TxPublisher) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, note) VALUES (?, ?)`, id, "two books"); err != nil {
				return err
			}
			if _, err := p.Publish(ctx, OrderPlaced{OrderID: id}); err != nil {
				return err
			}
			if id == 2 {
				return fmt.Errorf("payment declined") // the order and its message roll back
			}
			return nil
		})
		fmt.Printf("order %d: %v\n", id, err)
	}
	res, _ := ob.Drain(ctx, "orders")
	fmt.Println("delivered:", res.Delivered)
	// Output:
	// order 1: <nil>
	// order 2: payment declined
	// relayed {"order_id":1}
	// delivered: 1
}
