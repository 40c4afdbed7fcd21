package riversink_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/outboxer-go/outboxer/core"
	riversink "github.com/outboxer-go/outboxer/sinks/river"
)

// TestRefusedJobFailsAlone delivers batches of 12 messages in 3 groups, one of them a
// poison PostgreSQL refuses to store as a River job, as Sink (Deliver) and as TxSink
// (DeliverTx in a transaction that then commits): only the poison fails, permanently,
// with a reason; every other message gets exactly one job, in outbox order. Payloads
// that look like a poison but are not (an escaped backslash before u0000, a surrogate
// pair) are delivered like the rest.
//
// The poisons cover both of the sink's defences: its check of each job before the
// insert (jsonb's refusals, a priority River refuses) and, for a refusal no check
// foresees (a number beyond PostgreSQL's numeric), the one-at-a-time retry after the
// batch insert failed.
func TestRefusedJobFailsAlone(t *testing.T) {
	cases := []struct {
		name, payload string
		want          error  // what the poison's failure wraps, besides core.ErrPermanent
		reason        string // what its text says
		priority      int    // the poison's job priority, from Options.Job, when not 0
	}{
		// Refused by the sink's own check, before River sees the batch.
		{"nul-escape", `{"text":"a\u0000b"}`, riversink.ErrNotJSONB, `\u0000`, 0},
		{"nul-escape-in-key", `{"a\u0000":1}`, riversink.ErrNotJSONB, `\u0000`, 0},
		{"lone-high-surrogate", `{"text":"\ud83d."}`, riversink.ErrNotJSONB, "high surrogate", 0},
		{"lone-low-surrogate", `["\ude00"]`, riversink.ErrNotJSONB, "low surrogate", 0},
		{"invalid-utf8", "{\"text\":\"\xff\xfe\"}", riversink.ErrNotJSONB, "invalid UTF-8", 0},
		// Refused by PostgreSQL (numeric overflow, SQLSTATE 22003): the batch insert
		// fails, and the one-at-a-time fallback finds the poison.
		{"numeric-overflow", `{"n":1e1000000}`, nil, "22003", 0},
		// Insert options River refuses for a whole InsertMany, refused by the sink for
		// the message alone.
		{"bad-priority", `{"n":5}`, nil, "priority 9", 9},
		// No poison: every message is delivered.
		{"escaped-backslash", `{"text":"\\u0000"}`, nil, "", 0},
		{"surrogate-pair", `{"text":"\ud83d\ude00"}`, nil, "", 0},
	}
	for _, mode := range []string{"Deliver", "DeliverTx"} {
		for _, c := range cases {
			t.Run(mode+"/"+c.name, func(t *testing.T) {
				db := newRiverDB(t)
				ctx := context.Background()
				batch := envelopes(1, 12, 3)
				const poison = 5 // group g2, with messages of its group before and after it
				batch[poison-1].Payload = []byte(c.payload)

				opts := riversink.Options{}
				if c.priority != 0 {
					opts.Job = func(env core.Envelope) (river.JobArgs, *river.InsertOpts, error) {
						j, err := riversink.JobFromEnvelope(env)
						if env.ID == poison {
							return j, &river.InsertOpts{Priority: c.priority}, err
						}
						return j, nil, err
					}
				}
				var err error
				if mode == "Deliver" {
					client, cerr := river.NewClient(riverpgxv5.New(db.pool), &river.Config{Schema: db.Schema})
					if cerr != nil {
						t.Fatal(cerr)
					}
					sink, serr := riversink.New(client, opts)
					if serr != nil {
						t.Fatal(serr)
					}
					err = sink.Deliver(ctx, batch)
				} else {
					sink, serr := riversink.NewTx(db.insertOnly(t), opts)
					if serr != nil {
						t.Fatal(serr)
					}
					err = deliverTxAndCommit(t, ctx, db.DB.DB, sink, batch)
				}

				want := ids(batch)
				if c.reason == "" {
					if err != nil {
						t.Fatalf("%s = %v, want every message delivered", mode, err)
					}
				} else {
					var pf *core.PartialFailure
					if !errors.As(err, &pf) || len(pf.Failed) != 1 || pf.Failed[poison] == nil {
						t.Fatalf("%s = %v, want a partial failure of message %d only", mode, err, poison)
					}
					ferr := pf.Failed[poison]
					if !errors.Is(ferr, core.ErrPermanent) || (c.want != nil && !errors.Is(ferr, c.want)) ||
						!strings.Contains(ferr.Error(), c.reason) {
						t.Fatalf("message %d failed with %v; want permanent, wrapping %v, saying %q", poison, ferr, c.want, c.reason)
					}
					want = slices.DeleteFunc(want, func(id int64) bool { return id == poison })
				}
				if got := db.jobs(t); !slices.Equal(got, want) {
					t.Fatalf("jobs for outbox ids %v, want %v (each once, in order)", got, want)
				}
			})
		}
	}
}

// deliverTxAndCommit runs DeliverTx in a transaction and commits it, as the engine does
// after recording a partial failure.
func deliverTxAndCommit(t *testing.T, ctx context.Context, db *sql.DB, sink *riversink.TxSink, batch []core.Envelope) error {
	t.Helper()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	derr := sink.DeliverTx(ctx, tx, batch)
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit after DeliverTx (%v): %v", derr, err)
	}
	return derr
}
