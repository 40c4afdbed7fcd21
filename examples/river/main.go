// River: orders in PostgreSQL, each event handed to a River job in the transaction that
// removes it from the outbox, so no job is lost or inserted twice, even on a crash.
// A River worker on a queue with a single worker runs the jobs in order and prints them.
//
// It needs PostgreSQL: DATABASE_URL, or the local server by default. River's tables and
// the outbox go into the connection's search_path.
//
//	go run ./examples/river
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/outboxer-go/outboxer/core"
	riversink "github.com/outboxer-go/outboxer/sinks/river"
)

// OrderPlaced is the event; its group key keeps one order's events in sequence.
type OrderPlaced struct {
	OrderID int64   `json:"order_id"`
	Total   float64 `json:"total"`
}

func (OrderPlaced) Outbox() string      { return "orders" }
func (OrderPlaced) MessageType() string { return "orders.OrderPlaced" }
func (e OrderPlaced) GroupKey() string  { return fmt.Sprintf("order:%d", e.OrderID) }

// printWorker runs the jobs: riversink.Job carries the outbox message.
type printWorker struct {
	river.WorkerDefaults[riversink.Job]
	out  io.Writer
	done chan<- struct{}
}

func (w *printWorker) Work(ctx context.Context, job *river.Job[riversink.Job]) error {
	var e OrderPlaced
	if err := json.Unmarshal(job.Args.Payload, &e); err != nil {
		return err
	}
	fmt.Fprintf(w.out, "job %s %s: total %.2f\n", job.Args.Type, job.Args.GroupKey, e.Total)
	w.done <- struct{}{}
	return nil
}

func main() {
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, dsn, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, dsn string, out io.Writer) error {
	quiet := slog.New(slog.DiscardHandler)
	db, err := sql.Open("pgx", dsn) // the outbox and the business tables
	if err != nil {
		return err
	}
	defer db.Close()
	pool, err := pgxpool.New(ctx, dsn) // River's workers
	if err != nil {
		return err
	}
	defer pool.Close()

	// River's tables, the outbox table and the business table, in one database.
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: quiet})
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return err
	}
	if err := core.Migrate(ctx, db, core.MigrateOptions{}); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY, total numeric NOT NULL)`); err != nil {
		return err
	}

	// The workers: one worker on the queue, so the jobs run in the order they were inserted.
	totals := []float64{25.50, 99.00, 12.75}
	done := make(chan struct{}, len(totals))
	workers := river.NewWorkers()
	river.AddWorker(workers, &printWorker{out: out, done: done})
	workerClient, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:  quiet,
		Queues:  map[string]river.QueueConfig{"orders": {MaxWorkers: 1}},
		Workers: workers,
	})
	if err != nil {
		return err
	}

	// The relay: an insert-only River client on database/sql, used in the engine's transaction.
	inserter, err := river.NewClient(riverdatabasesql.New(nil), &river.Config{Logger: quiet})
	if err != nil {
		return err
	}
	sink, err := riversink.NewTx(inserter, riversink.Options{InsertOpts: river.InsertOpts{Queue: "orders"}})
	if err != nil {
		return err
	}
	ob, err := core.New(core.Config{
		DB:       db,
		Logger:   quiet,
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: sink, PollInterval: 50 * time.Millisecond}},
	})
	if err != nil {
		return err
	}

	// Each order and its event commit together.
	for _, total := range totals {
		err := ob.InTx(ctx, db, func(tx *sql.Tx, p *core.TxPublisher) error {
			var id int64
			if err := tx.QueryRowContext(ctx, `INSERT INTO orders (total) VALUES ($1) RETURNING id`, total).Scan(&id); err != nil {
				return err
			}
			_, err := p.Publish(ctx, OrderPlaced{OrderID: id, Total: total})
			return err
		})
		if err != nil {
			return err
		}
	}

	if err := workerClient.Start(ctx); err != nil {
		return err
	}
	runCtx, stopRelay := context.WithCancel(ctx)
	relayed := make(chan error, 1)
	go func() { relayed <- ob.Run(runCtx) }()
	for range totals {
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	stopRelay()
	err = <-relayed
	if stopErr := workerClient.Stop(context.WithoutCancel(ctx)); err == nil {
		err = stopErr
	}
	if err == nil {
		err = ctx.Err()
	}
	return err
}
