package entoutbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"entgo.io/ent"
	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	entoutbox "github.com/outboxer-go/outboxer/adapters/ent"
	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest" // registers the SQLite driver, modernc.org/sqlite
	entdb "github.com/outboxer-go/outboxer/examples/ent/ent"
)

type OrderPlaced struct {
	OrderID int64  `json:"order_id"`
	Note    string `json:"note"`
}

func (OrderPlaced) Outbox() string { return "orders" }

// setup opens a SQLite file with the outbox and the orders table (Atlas would create
// both from its migration directory), and an instance printing what it relays.
func setup(dir string) (*sql.DB, *entdb.Client, *core.Outboxer) {
	ctx := context.Background()
	pool, _ := sql.Open("sqlite", dbtest.SQLiteDSN(filepath.Join(dir, "shop.db")))
	_ = core.Migrate(ctx, pool, core.MigrateOptions{})
	client := entdb.NewClient(entdb.Driver(entsql.OpenDB(dialect.SQLite, pool)))
	_, _ = pool.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, note TEXT NOT NULL)`)
	ob, _ := core.New(core.Config{DB: pool, Manual: true, Outboxes: map[string]core.OutboxConfig{
		"orders": {Relay: core.RelayFunc(func(_ context.Context, batch []core.Envelope) error {
			for _, e := range batch {
				fmt.Printf("relayed %s\n", e.Payload)
			}
			return nil
		})},
	}})
	return pool, client, ob
}

func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "entoutbox")
	defer os.RemoveAll(dir)
	pool, client, ob := setup(dir)
	defer pool.Close()

	err := entoutbox.InTx(ctx, ob, client.Tx, func(ctx context.Context, tx *entdb.Tx, p *core.TxPublisher) error {
		order, err := tx.Order.Create().SetID(42).SetNote("two books").Save(ctx)
		if err != nil {
			return err
		}
		_, err = p.Publish(ctx, OrderPlaced{OrderID: order.ID, Note: order.Note})
		return err
	})
	fmt.Println("committed:", err == nil)
	res, _ := ob.Drain(ctx, "orders")
	fmt.Println("delivered:", res.Delivered)
	// Output:
	// committed: true
	// relayed {"order_id":42,"note":"two books"}
	// delivered: 1
}

func ExampleHook() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "entoutbox")
	defer os.RemoveAll(dir)
	pool, client, ob := setup(dir)
	defer pool.Close()

	// Every created order publishes an OrderPlaced in the order's own transaction.
	client.Order.Use(entoutbox.Hook[*entdb.Tx](ob, func(_ context.Context, m ent.Mutation, v ent.Value) ([]core.Message, error) {
		if o, ok := v.(*entdb.Order); ok && m.Op().Is(ent.OpCreate) {
			return []core.Message{OrderPlaced{OrderID: o.ID, Note: o.Note}}, nil
		}
		return nil, nil
	}))

	tx, _ := client.Tx(ctx)
	_ = tx.Order.Create().SetID(1).SetNote("rolled back").Exec(ctx)
	_ = tx.Rollback()

	tx, _ = client.Tx(ctx)
	_ = tx.Order.Create().SetID(2).SetNote("committed").Exec(ctx)
	_ = tx.Commit()

	res, _ := ob.Drain(ctx, "orders")
	fmt.Println("delivered:", res.Delivered)
	// Output:
	// relayed {"order_id":2,"note":"committed"}
	// delivered: 1
}
