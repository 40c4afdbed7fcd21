package pgxoutbox_test

import (
	"context"
	"database/sql"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	pgxoutbox "github.com/outboxer-go/outboxer/adapters/pgx"
	"github.com/outboxer-go/outboxer/core"
)

type OrderPlaced struct {
	OrderID int64 `json:"order_id"`
}

func (OrderPlaced) Outbox() string { return "orders" }

// A service on pgx alone: the instance runs over the same pool through stdlib.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/shop")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := pgxoutbox.Migrate(ctx, pool, core.MigrateOptions{}); err != nil {
		log.Fatal(err)
	}
	ob, err := core.New(core.Config{DB: stdlib.OpenDBFromPool(pool), PublishOnly: true,
		Outboxes: map[string]core.OutboxConfig{"orders": {}}})
	if err != nil {
		log.Fatal(err)
	}
	err = pgxoutbox.InTx(ctx, ob, pool, func(ctx context.Context, tx pgx.Tx, p *core.TxPublisher) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, note) VALUES ($1, $2)`, 42, "two books"); err != nil {
			return err
		}
		_, err := p.Publish(ctx, OrderPlaced{OrderID: 42}, core.WithGroupKey("order:42"))
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
}

// An instance whose DB goes through PgBouncer in transaction mode listens for
// notifications on a connection of its own, straight to PostgreSQL.
func ExampleNewListener() {
	ctx := context.Background()
	pooled, err := sql.Open("pgx", "postgres://app@pgbouncer:6432/shop?default_query_exec_mode=exec")
	if err != nil {
		log.Fatal(err)
	}
	listener, err := pgxoutbox.NewListener("postgres://app@db:5432/shop")
	if err != nil {
		log.Fatal(err)
	}
	ob, err := core.New(core.Config{DB: pooled, Notify: true, NotifyListener: listener,
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: relay}}})
	if err != nil {
		log.Fatal(err)
	}
	if err := ob.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

var relay = core.RelayFunc(func(context.Context, []core.Envelope) error { return nil })
