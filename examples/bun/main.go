// bun: an order service on bun, on embedded SQLite (no server needed) or, with
// -postgres, on PostgreSQL through bun's own driver, pgdriver, set up as bun's
// documentation does (OUTBOXER_EXAMPLE_POSTGRES, or postgres://postgres@127.0.0.1:5432/test;
// in a schema of its own, dropped at the end). Outboxer needs no Dialect for either: it
// tells it from the driver.
//
// Each order and its OrderPlaced event are written in one bun.Tx through bunoutbox.InTx:
// a declined payment rolls back both, and a failed RunInTx inside the transaction (a
// savepoint) drops only what was written inside it. The outbox tables come from a bun
// migration. Then the relay delivers what committed.
//
//	go run ./bun
//	go run ./bun -postgres
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/dialect/sqlitedialect"
	"github.com/uptrace/bun/driver/pgdriver"
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
	postgres := flag.Bool("postgres", false, "run on PostgreSQL through bun's pgdriver instead of SQLite")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	open := openSQLite
	if *postgres {
		open = openPostgres
	}
	if err := run(ctx, os.Stdout, open); err != nil {
		log.Fatal(err)
	}
}

// opener opens the example's database: the *sql.DB for the instance and bun over it,
// and a function that removes what it made.
type opener func(ctx context.Context) (pool *sql.DB, db *bun.DB, cleanup func(), err error)

// openSQLite opens a SQLite file in a directory of its own with modernc.org/sqlite.
func openSQLite(context.Context) (*sql.DB, *bun.DB, func(), error) {
	dir, err := os.MkdirTemp("", "outboxer-bun")
	if err != nil {
		return nil, nil, nil, err
	}
	pool, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, nil, err
	}
	db := bun.NewDB(pool, sqlitedialect.New())
	return pool, db, func() { db.Close(); os.RemoveAll(dir) }, nil
}

// postgresURL is the server the example uses with -postgres.
func postgresURL() string {
	return cmp.Or(os.Getenv("OUTBOXER_EXAMPLE_POSTGRES"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
}

// openPostgres opens PostgreSQL as bun's documentation does,
// sql.OpenDB(pgdriver.NewConnector(...)), in a schema of its own.
func openPostgres(ctx context.Context) (*sql.DB, *bun.DB, func(), error) {
	admin := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(postgresURL())))
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	schema := "outboxer_example_" + hex.EncodeToString(b)
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		admin.Close()
		return nil, nil, nil, err
	}
	pool := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(postgresURL()),
		pgdriver.WithConnParams(map[string]any{"search_path": schema})))
	db := bun.NewDB(pool, pgdialect.New())
	return pool, db, func() {
		db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = admin.ExecContext(ctx, "DROP SCHEMA "+schema+" CASCADE")
		admin.Close()
	}, nil
}

// Order is the business row.
type Order struct {
	bun.BaseModel `bun:"table:orders"`
	ID            int64 `bun:"id,pk"`
	Wrapped       bool  `bun:"wrapped,notnull"`
}

func run(ctx context.Context, out io.Writer, open opener) error {
	pool, db, cleanup, err := open(ctx)
	if err != nil {
		return err
	}
	defer cleanup()

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
