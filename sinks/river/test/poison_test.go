package riversink_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	riversink "github.com/outboxer-go/outboxer/sinks/river"
	"github.com/outboxer-go/outboxer/sinktest"
)

// TestPoison runs the sinktest Poison case through the engine on River, with the sink's
// default job (the payload as JSON), as Sink (Deliver) and as TxSink (the engine's
// DeliverTx, in the outbox's own transaction). The outbox table lives in River's
// schema, as it must for TxSink.
//
// Three poisons: a payload that is not JSON, which the sink's own validation refuses
// with core.Permanent before River sees it; a JSON payload with a \u0000 escape, which
// PostgreSQL's jsonb cannot store and the sink's check refuses (ErrNotJSONB) so that it
// does not fail the InsertMany of its whole batch; and a number too large for
// PostgreSQL's numeric, which no check foresees: the batch insert fails, the sink
// inserts the jobs one at a time and PostgreSQL's refusal (SQLSTATE 22003) fails the
// poison alone, permanently. Every other message arrives exactly once.
func TestPoison(t *testing.T) {
	for _, mode := range []string{"Deliver", "DeliverTx"} {
		t.Run(mode, func(t *testing.T) {
			var mu sync.Mutex
			dbs := map[*testing.T]*riverDB{}
			sinktest.RunPoison(t, sinktest.Harness{
				New: func(t *testing.T) *sinktest.Target {
					db := newRiverDB(t)
					mu.Lock()
					dbs[t] = db
					mu.Unlock()
					return &sinktest.Target{
						Relay: newPoisonRelay(t, db, mode),
						Read: func(ctx context.Context, n int) ([]sinktest.Received, error) {
							return readDefaultJobs(ctx, db.DB.DB, n)
						},
					}
				},
				DB: func(t *testing.T) *sql.DB {
					mu.Lock()
					defer mu.Unlock()
					return dbs[t].DB.DB
				},
				Poisons: []sinktest.Poison{{
					Name:      "not-json",
					Payload:   []byte("this payload is not JSON"),
					Permanent: true,
					Reason:    "payload is not JSON",
					By:        "sink: the default job's validation refuses a payload that is not JSON before River sees it",
				}, {
					Name:      "nul-escape",
					Payload:   []byte(`{"text":"a\u0000b"}`),
					Permanent: true,
					Reason:    "jsonb cannot store the job",
					By:        "sink: its check refuses a job PostgreSQL's jsonb cannot store (a \\u0000 escape) before the insert",
				}, {
					Name:      "numeric-overflow",
					Payload:   []byte(`{"n":1e1000000}`),
					Permanent: true,
					Reason:    "22003",
					By:        "database: PostgreSQL refuses the batch insert (numeric overflow); the sink's one-at-a-time retry isolates the poison",
				}},
				PoisonScore: func(t *testing.T, r sinktest.PoisonResult) {
					if r.Duplicated != 0 {
						t.Errorf("%d extra job(s) for the messages around the poison; want each exactly once", r.Duplicated)
					}
					dbtest.Record(t, dbtest.Score{
						Scenario: "7 poison message", Variant: mode + " " + r.Poison.Name + " " + r.Variant, Database: "river",
						Published: r.Published, Committed: r.Committed, Delivered: r.Delivered, Lost: r.Lost,
						Reordered: r.Reordered, Duplicated: r.Duplicated, Recover: r.Recover,
						Notes: r.Poison.By + "; " + r.Outcome,
					})
				},
			})
		})
	}
}

// newPoisonRelay returns the sink with its default job, as the engine would get it.
func newPoisonRelay(t *testing.T, db *riverDB, mode string) core.Relay {
	t.Helper()
	if mode == "DeliverTx" {
		sink, err := riversink.NewTx(db.insertOnly(t), riversink.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return sink
	}
	client, err := river.NewClient(riverpgxv5.New(db.pool), &river.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := riversink.New(client, riversink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return sink
}

// readDefaultJobs waits until at least n jobs exist and returns them all in job ID
// order, decoded from the default job's args.
func readDefaultJobs(ctx context.Context, db *sql.DB, n int) ([]sinktest.Received, error) {
	for {
		got, err := listDefaultJobs(ctx, db)
		if err != nil || len(got) >= n {
			return got, err
		}
		select {
		case <-ctx.Done():
			return got, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func listDefaultJobs(ctx context.Context, db *sql.DB) ([]sinktest.Received, error) {
	rows, err := db.QueryContext(ctx, `SELECT args FROM river_job ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []sinktest.Received
	for rows.Next() {
		var args []byte
		if err := rows.Scan(&args); err != nil {
			return nil, err
		}
		var j riversink.Job
		if err := json.Unmarshal(args, &j); err != nil {
			return nil, fmt.Errorf("job args %s: %w", args, err)
		}
		out = append(out, sinktest.Received{ID: j.ID, Outbox: j.Outbox, Type: j.Type, GroupKey: j.GroupKey, Payload: j.Payload, Headers: j.Headers})
	}
	return out, rows.Err()
}
