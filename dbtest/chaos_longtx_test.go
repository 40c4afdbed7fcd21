package dbtest_test

// Reliability scenario 2: a long or idle transaction holds an outbox message, not yet
// committed, while traffic flows. Unrelated groups (in its partition too) keep being
// delivered; once it commits its message is delivered, and its wait shows in Status as
// the age of the partition's oldest pending message.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

func TestChaosLongTransaction(t *testing.T) {
	for _, variant := range []string{"idle", "busy"} {
		t.Run(variant, func(t *testing.T) {
			// SQLite is left out: a transaction that wrote holds its only write lock, so
			// nothing else can publish while it is open.
			chaosForDialects(t, []core.Dialect{core.Postgres, core.MySQL}, func(t *testing.T, db *dbtest.DB) {
				chaosLongTx(t, db, variant)
			})
		})
	}
}

func chaosLongTx(t *testing.T, db *dbtest.DB, variant string) {
	ctx := context.Background()
	const partitions = 2
	traffic := dbtest.Pick(400, 20000)
	minHold := time.Duration(dbtest.Pick(0, 30)) * time.Second
	heldPart := core.PartitionFor("held", partitions)

	var heldID atomic.Int64
	arrived := make(chan core.Envelope, 1)
	release := make(chan struct{})
	sink := newChaosSink()
	sink.gate = func(ctx context.Context, batch []core.Envelope) error {
		for _, e := range batch {
			if e.ID == heldID.Load() {
				select {
				case arrived <- e:
				default:
				}
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		return nil
	}
	ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{"orders": {
		Relay: sink, Partitions: partitions, BatchSize: 50, PollInterval: 10 * time.Millisecond,
	}}})
	stop := run(t, ob)
	ledger := newChaosLedger()

	// The transaction that stays open.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	held, err := ob.Publish(ctx, tx, event{Seq: -1, Group: "held"})
	if err != nil {
		t.Fatal(err)
	}
	heldID.Store(held.ID)
	insertedAt := time.Now()
	busyDone := make(chan struct{})
	var busyStatements atomic.Int64
	var busyWG sync.WaitGroup
	if variant == "busy" {
		// A long transaction at work: it keeps reading, and so keeps its snapshot.
		busyWG.Go(func() {
			for {
				select {
				case <-busyDone:
					return
				case <-time.After(5 * time.Millisecond):
				}
				var n int
				if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+core.DefaultTable).Scan(&n); err != nil {
					t.Errorf("statement in the long transaction: %v", err)
					return
				}
				busyStatements.Add(1)
			}
		})
	}

	// Traffic in 40 other groups, about half of them in the held message's partition, at
	// most about 1,000 messages a second: traffic flowing, not a flood (unpaced, a fast
	// machine publishes a quarter of a million messages while the transaction is held,
	// and the test would measure how long they take to drain over rows that the open
	// transaction keeps from being cleaned up; the README says what that costs).
	var inHeldPart atomic.Int64
	var published atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w * 5; ; i += 20 {
				if int(published.Load()) >= traffic && time.Since(insertedAt) >= minHold {
					return
				}
				msgs := make([]core.Message, 5)
				for j := range msgs {
					msgs[j] = event{Seq: i + j, Group: fmt.Sprintf("u%d", (i+j)%40)}
				}
				ptx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Errorf("begin: %v", err)
					return
				}
				envs, err := ob.PublishAll(ctx, ptx, msgs)
				if err == nil {
					err = ptx.Commit()
				}
				if err != nil {
					_ = ptx.Rollback()
					t.Errorf("publish: %v", err)
					return
				}
				ledger.commit(envs...)
				published.Add(int64(len(envs)))
				time.Sleep(20 * time.Millisecond)
				for _, e := range envs {
					if e.Partition == heldPart {
						inHeldPart.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	flowing := ledger.committedCount()
	// Every unrelated message is delivered while the transaction is still open.
	eventually(t, 60*time.Second, "the unrelated traffic delivered while the transaction is open", func() bool {
		return sink.distinct() >= flowing
	})
	if p := sink.position(held.ID); p >= 0 {
		t.Fatalf("the open transaction's message %d was delivered before its commit", held.ID)
	}
	if inHeldPart.Load() == 0 {
		t.Fatalf("no traffic in the held message's partition %d: the test did not check it", heldPart)
	}
	// What Status shows while the transaction is open: nothing of it. Its row is not
	// committed, so no other session sees it: the partition looks empty once the traffic
	// is confirmed.
	eventually(t, 30*time.Second, "an empty backlog in Status", func() bool {
		st, err := ob.Status(ctx, "orders")
		if err != nil {
			t.Fatalf("Status: %v", err)
		}
		for _, p := range st {
			if p.Pending != 0 || p.OldestAge != 0 {
				return false
			}
		}
		// Health (and the OpenTelemetry gauges, which read it) say the same: no lag.
		h, err := ob.Health(ctx, "orders")
		if err != nil {
			t.Fatalf("Health: %v", err)
		}
		oh, _ := h.Outbox("orders")
		return oh.Pending == 0 && oh.OldestAge == 0
	})

	close(busyDone)
	busyWG.Wait()
	heldFor := time.Since(insertedAt)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	ledger.commit(held)

	// After the commit the message is pending with its insert time: while the relay holds
	// it, Status shows the partition's oldest message as old as the transaction was long.
	var got core.Envelope
	select {
	case got = <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatalf("the message of the committed transaction was not handed to the relay within 30s")
	}
	atLeast := time.Since(insertedAt)
	st, err := ob.Status(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	part := st[heldPart]
	if part.Pending != 1 {
		t.Errorf("Status: partition %d pending = %d while its one message is being delivered, want 1", heldPart, part.Pending)
	}
	// The database stamps the row at the insert (PostgreSQL: at the transaction's start),
	// before insertedAt; same host, same clock (1 ms for MariaDB's microsecond rounding).
	if part.OldestAge < atLeast-time.Millisecond {
		t.Errorf("Status: partition %d oldest age %v, want at least %v (the transaction was open %v)", heldPart, part.OldestAge, atLeast, heldFor)
	}
	h, err := ob.Health(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	oh, _ := h.Outbox("orders")
	if oh.Pending != 1 || oh.OldestAge < atLeast-time.Millisecond {
		t.Errorf("Health: pending %d, oldest age %v; want 1 and at least %v", oh.Pending, oh.OldestAge, atLeast)
	}
	if ph := oh.Partitions[heldPart]; ph.Partition != heldPart || ph.OldestAge < atLeast-time.Millisecond {
		t.Errorf("Health: partition %d oldest age %v, want at least %v", ph.Partition, ph.OldestAge, atLeast)
	}
	if got.CreatedAt.After(insertedAt) {
		t.Errorf("the delivered envelope was created at %v, after the insert returned at %v", got.CreatedAt, insertedAt)
	}
	close(release)
	select {
	case <-sink.delivered(held.ID):
	case <-time.After(30 * time.Second):
		t.Fatalf("message %d not delivered after its transaction committed", held.ID)
	}
	stop()

	var left int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+core.DefaultTable).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d rows left in the message table after every delivery", left)
	}
	score := dbtest.Tally(dbtest.Score{Scenario: "2 long or idle transaction", Variant: variant, Database: chaosScore(db),
		Published: flowing + 1}, ledger.committed, sink.deliveries())
	chaosCheckTally(t, score)
	if score.Reordered != 0 || score.Duplicated != 0 {
		t.Errorf("reordered %d, duplicated %d with no fault", score.Reordered, score.Duplicated)
	}
	score.Notes = fmt.Sprintf("transaction open %v (%s, %d statements in it); meanwhile %d unrelated messages delivered, %d of them in its partition; Status and Health while open: pending 0, no lag; after commit: pending %d, oldest age %v (Health: %v)",
		heldFor.Round(time.Millisecond), variant, busyStatements.Load(), flowing, inHeldPart.Load(), part.Pending, part.OldestAge.Round(time.Millisecond), oh.OldestAge.Round(time.Millisecond))
	dbtest.Record(t, score)
}

// TestChaosConfirmIgnoresOpenPublishers: confirming a batch does not wait for a
// publishing transaction that is still open. On MariaDB a confirmation by ID list used
// to be run as a full scan when the batch was a good part of a small table, and waited
// for the row lock of the open transaction's uncommitted message (until the lock wait
// timeout): one open transaction stalled delivery everywhere.
func TestChaosConfirmIgnoresOpenPublishers(t *testing.T) {
	chaosForDialects(t, []core.Dialect{core.Postgres, core.MySQL}, func(t *testing.T, db *dbtest.DB) {
		for _, keep := range []bool{false, true} {
			t.Run(fmt.Sprintf("keep=%v", keep), func(t *testing.T) {
				ctx := context.Background()
				sink := newChaosSink()
				retention := core.Delete
				if keep {
					retention = core.KeepFor(time.Hour)
				}
				table := "ooo_confirm"
				if keep {
					table = "ooo_confirm_keep"
				}
				ob := setup(t, db, core.Config{Manual: true, Table: table, Outboxes: map[string]core.OutboxConfig{"orders": {
					Relay: sink, Retention: retention,
				}}})
				var envs []core.Envelope
				for i := range 10 {
					envs = append(envs, publish(t, ob, db.DB, event{Seq: i, Group: fmt.Sprint("g", i%3)})...)
				}
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback()
				open, err := ob.Publish(ctx, tx, event{Seq: 10, Group: "open"})
				if err != nil {
					t.Fatal(err)
				}
				// Well inside any lock wait timeout: the confirmation must not wait at all.
				dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				defer cancel()
				res, err := ob.Drain(dctx, "orders")
				if err != nil {
					t.Fatalf("Drain with a publishing transaction open: %v", err)
				}
				if res.Delivered != len(envs) {
					t.Fatalf("Drain delivered %d, want %d", res.Delivered, len(envs))
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
				if res, err := ob.Drain(ctx, "orders"); err != nil || res.Delivered != 1 {
					t.Fatalf("Drain after the commit: %+v, %v; want the one message", res, err)
				}
				if sink.position(open.ID) < 0 || sink.distinct() != len(envs)+1 {
					t.Fatalf("delivered %d distinct messages, want %d", sink.distinct(), len(envs)+1)
				}
			})
		}
	})
}
