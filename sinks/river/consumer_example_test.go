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

// A River worker whose queue also receives jobs of its kind that the sink did not
// insert: they carry no outboxer-key, so the handler does not run for them. The
// OnForeign policy here copies such a job's args to a table and returns nil, so the job
// completes; without the option it would complete with a warning
// (inbox.SkipForeign), and with inbox.StopOnForeign it would fail and be retried.
// TestInboxWorkerDeadLettersForeignJob runs this against PostgreSQL.
func ExampleOnForeign() {
	db, err := sql.Open("pgx", "postgres://billing@localhost/billing")
	if err != nil {
		log.Fatal(err)
	}
	in, err := inbox.New(inbox.Config{DB: db})
	if err != nil {
		log.Fatal(err)
	}
	worker, err := riversink.NewInboxWorker(in, "billing",
		func(ctx context.Context, tx *sql.Tx, job *river.Job[riversink.Job], _ inbox.Outcome) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO invoices (order_json) VALUES ($1)`, string(job.Args.Payload))
			return err
		},
		riversink.OnForeign(func(ctx context.Context, m inbox.ForeignMessage) error {
			_, err := db.ExecContext(ctx, `INSERT INTO dead_letters (job, args) VALUES ($1, $2)`, m.ID, m.Payload)
			return err // nil: the job completes; an error fails it, and River retries it
		}))
	if err != nil {
		log.Fatal(err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	_ = &river.Config{Workers: workers} // and river.NewClient(driver, config)
}
