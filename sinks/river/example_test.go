package riversink_test

import (
	"database/sql"
	"fmt"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"

	"github.com/outboxer-go/outboxer/core"
	riversink "github.com/outboxer-go/outboxer/sinks/river"
)

// With River in the outbox's database, the sink inserts the jobs in the engine's own
// transaction: an insert-only client on database/sql is all it needs. Workers run on a
// River client of their own (riverpgxv5), with one worker on the queue to keep order.
func ExampleNewTx() {
	var db *sql.DB // the outbox's PostgreSQL database, with River's tables migrated

	inserter, err := river.NewClient(riverdatabasesql.New(nil), &river.Config{})
	if err != nil {
		panic(err)
	}
	sink, err := riversink.NewTx(inserter, riversink.Options{
		InsertOpts: river.InsertOpts{Queue: "orders", Priority: 2},
	})
	if err != nil {
		panic(err)
	}
	_, err = core.New(core.Config{DB: db, PublishOnly: true, Outboxes: map[string]core.OutboxConfig{
		"orders": {Relay: sink},
	}})
	fmt.Println(err)
}

// Options.Job chooses the args (and insert options) per message.
func ExampleOptions_job() {
	opts := riversink.Options{
		Job: func(env core.Envelope) (river.JobArgs, *river.InsertOpts, error) {
			job, err := riversink.JobFromEnvelope(env)
			if err != nil {
				return nil, nil, err
			}
			if env.Type == "payment.failed" {
				return job, &river.InsertOpts{Queue: "urgent", Priority: 1}, nil
			}
			return job, nil, nil
		},
	}
	_ = opts
	job, err := riversink.JobFromEnvelope(core.Envelope{ID: 7, Outbox: "orders", Type: "order.placed", Payload: []byte(`{"n":7}`)})
	fmt.Println(job.Kind(), job.ID, string(job.Payload), err)
	_, err = riversink.JobFromEnvelope(core.Envelope{ID: 8, Payload: []byte{0xff}})
	fmt.Println(err)
	// Output:
	// outboxer_message 7 {"n":7} <nil>
	// message 8: riversink: payload is not JSON; set Options.Job to build the job args
}
