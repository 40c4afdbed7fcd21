package riversink_test

import (
	"context"
	"database/sql"
	"log"

	"github.com/riverqueue/river"

	"github.com/outboxer-go/outboxer/inbox"
	riversink "github.com/outboxer-go/outboxer/sinks/river"
)

// A River worker for the sink's jobs with an inbox: each job's handler runs in a
// transaction that claims the job's key (MetadataKey) first, so a job that runs again
// (a retry after a crash that followed the commit, a message inserted twice) writes
// the invoice once. TestInboxWorkerRunsEachJobOnce runs this against PostgreSQL.
func ExampleNewInboxWorker() {
	db, err := sql.Open("pgx", "postgres://billing@localhost/billing")
	if err != nil {
		log.Fatal(err)
	}
	in, err := inbox.New(inbox.Config{DB: db})
	if err != nil {
		log.Fatal(err)
	}
	worker, err := riversink.NewInboxWorker(in, "billing", func(ctx context.Context, tx *sql.Tx, job *river.Job[riversink.Job], _ inbox.Outcome) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO invoices (order_json) VALUES ($1)`, string(job.Args.Payload))
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	_ = &river.Config{Workers: workers} // and river.NewClient(driver, config)
}
