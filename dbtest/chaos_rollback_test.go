package dbtest_test

// Reliability scenario 5: concurrent publishers with 20% rollbacks across many groups,
// while the relay runs. No rolled-back message is ever stored or delivered, every
// committed one is delivered, and order per group holds: with one writer per group, and
// with groups shared by every publisher under SerializeWrites.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

func TestChaosRollbacks(t *testing.T) {
	for _, variant := range []string{"owned groups", "shared groups+SerializeWrites"} {
		t.Run(variant, func(t *testing.T) {
			chaosForDialects(t, dbtest.Dialects, func(t *testing.T, db *dbtest.DB) {
				chaosRollbacks(t, db, variant)
			})
		})
	}
}

func chaosRollbacks(t *testing.T, db *dbtest.DB, variant string) {
	ctx := context.Background()
	const (
		publishers = 16
		groups     = 200
	)
	shared := variant != "owned groups"
	txs := dbtest.Pick(800, 20000) // transactions in all, of 1 to 3 messages each
	sink := newChaosSink()
	ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {
		Relay: sink, Partitions: 4, BatchSize: 100, PollInterval: 10 * time.Millisecond,
		SerializeWrites: shared, Retention: core.KeepFor(time.Hour),
	}}})
	if _, err := db.ExecContext(ctx, `CREATE TABLE business (msg_id BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	stop := run(t, ob)
	began := time.Now()
	ledger := newChaosLedger()
	var (
		mu      sync.Mutex
		retried int // transactions the database aborted (deadlock) and the publisher rolled back
	)

	var wg sync.WaitGroup
	for w := range publishers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for i := w; i < txs; i += publishers {
				n := 1 + rng.IntN(3)
				msgs := make([]core.Message, n)
				for j := range msgs {
					g := rng.IntN(groups)
					if !shared {
						g = g - g%publishers + w // the groups of this publisher only
						if g >= groups {
							g -= publishers
						}
					}
					msgs[j] = event{Seq: i*3 + j, Group: fmt.Sprintf("g%03d", g)}
				}
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Errorf("begin: %v", err)
					return
				}
				envs, err := ob.PublishAll(ctx, tx, msgs)
				if err == nil {
					// The business write of the same transaction.
					for _, e := range envs {
						if _, err = tx.ExecContext(ctx, chaosQ(db, `INSERT INTO business (msg_id) VALUES (?)`), e.ID); err != nil {
							break
						}
					}
				}
				if err != nil {
					// MariaDB may pick a publisher as a deadlock victim: the application
					// rolls back, as it would with any failed transaction.
					_ = tx.Rollback()
					if db.Dialect == core.MySQL || db.Dialect == core.SQLite {
						mu.Lock()
						retried++
						mu.Unlock()
						ledger.rollback(envs...)
						continue
					}
					t.Errorf("publish: %v", err)
					return
				}
				if rng.IntN(5) == 0 {
					if err := tx.Rollback(); err != nil {
						t.Errorf("rollback: %v", err)
						return
					}
					ledger.rollback(envs...)
					continue
				}
				if err := tx.Commit(); err != nil {
					t.Errorf("commit: %v", err)
					return
				}
				ledger.commit(envs...)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	want := ledger.committedCount()
	eventually(t, 120*time.Second, "every committed message delivered", func() bool { return sink.distinct() >= want })
	took := time.Since(began)
	stop()

	deliveries, bodies := sink.deliveries(), sink.payloads()
	// The consumer never saw a rolled-back message: judged by payload (each is unique),
	// since SQLite gives a rolled-back ID to the next message.
	phantoms := 0
	for i, d := range deliveries {
		if ledger.rolledBackBody[bodies[i]] {
			phantoms++
		} else if bodies[i] != ledger.committedBody[d.ID] {
			t.Errorf("message %d delivered with payload %s, committed with %s", d.ID, bodies[i], ledger.committedBody[d.ID])
		}
	}
	if phantoms != 0 {
		t.Errorf("%d deliveries of rolled-back messages", phantoms)
	}
	// SQL: the table holds exactly the committed messages, all delivered; the business
	// rows are exactly those of the committed transactions.
	stored := chaosStoredRows(t, db)
	for id, g := range ledger.committed {
		s, ok := stored[id]
		switch {
		case !ok:
			t.Errorf("committed message %d is not in the table", id)
		case s.state != 1 || s.group != g || s.payload != ledger.committedBody[id]:
			t.Errorf("message %d: state %d group %q payload %s, want delivered (1) in %q with %s", id, s.state, s.group, s.payload, g, ledger.committedBody[id])
		}
	}
	for id := range stored {
		if _, ok := ledger.committed[id]; !ok {
			t.Errorf("message %d is in the table but its transaction did not commit", id)
		}
	}
	var business int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM business`).Scan(&business); err != nil {
		t.Fatal(err)
	}
	if business != len(ledger.committed) {
		t.Errorf("%d business rows, want %d (one per committed message)", business, len(ledger.committed))
	}

	score := dbtest.Tally(dbtest.Score{Scenario: "5 concurrent publishers, 20% rollbacks", Variant: variant, Database: chaosScore(db),
		Published: len(ledger.committed) + len(ledger.rolledBackBody)}, ledger.committed, deliveries)
	score.Phantom += phantoms // by payload; Tally judges by ID only
	chaosCheckTally(t, score)
	if score.Reordered != 0 {
		t.Errorf("%d deliveries out of order within their group", score.Reordered)
	}
	if score.Duplicated != 0 {
		t.Errorf("%d duplicate deliveries with no fault", score.Duplicated)
	}
	score.Notes = fmt.Sprintf("%d publishers, %d groups, %d transactions: %d committed, %d rolled back (%d of them aborted by the database); %d rolled-back messages, none stored or delivered; %v",
		publishers, groups, ledger.txs+ledger.aborted, ledger.txs, ledger.aborted, retried, len(ledger.rolledBackBody), took.Round(time.Millisecond))
	dbtest.Record(t, score)
}
