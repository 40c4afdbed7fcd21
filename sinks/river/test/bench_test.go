package riversink_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/outboxer-go/outboxer/core"
	riversink "github.com/outboxer-go/outboxer/sinks/river"
)

// BenchmarkDeliver measures batches of 100 delivered directly, against a relay that does
// nothing, in the same run: DeliverTx in a transaction of its own (committed each time,
// as the engine does) and Deliver with unique jobs.
func BenchmarkDeliver(b *testing.B) {
	const batchSize = 100
	report := func(b *testing.B) {
		b.ReportMetric(float64(b.N*batchSize)/b.Elapsed().Seconds(), "msgs/s")
	}
	b.Run("noop", func(b *testing.B) {
		relay := core.RelayFunc(func(context.Context, []core.Envelope) error { return nil })
		batch := envelopes(1, batchSize, 10)
		for b.Loop() {
			if err := relay.Deliver(context.Background(), batch); err != nil {
				b.Fatal(err)
			}
		}
		report(b)
	})
	db := newRiverDB(b)
	b.Run("noop-in-tx", func(b *testing.B) {
		ctx := context.Background()
		for b.Loop() {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		report(b)
	})
	b.Run("DeliverTx", func(b *testing.B) {
		sink, err := riversink.NewTx(db.insertOnly(b), riversink.Options{})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		next := int64(1)
		for b.Loop() {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := sink.DeliverTx(ctx, tx, envelopes(next, batchSize, 10)); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
			next += batchSize
		}
		report(b)
	})
	b.Run("Deliver-unique", func(b *testing.B) {
		client, err := river.NewClient(riverpgxv5.New(db.pool), &river.Config{Schema: db.Schema})
		if err != nil {
			b.Fatal(err)
		}
		sink, err := riversink.New(client, riversink.Options{Table: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		next := int64(1)
		for b.Loop() {
			if err := sink.Deliver(ctx, envelopes(next, batchSize, 10)); err != nil {
				b.Fatal(err)
			}
			next += batchSize
		}
		report(b)
	})
}

// BenchmarkEngineDrain drains 10,000 messages per iteration through the engine (Manual
// mode, Drain) on PostgreSQL: first with a relay that does nothing, then with the TxSink
// inserting River jobs in the engine's transaction, in the same run and database.
// msgs/s is the drain rate (publishing is not timed); x-noop is the TxSink's rate over
// the no-op relay's.
func BenchmarkEngineDrain(b *testing.B) {
	db := newRiverDB(b)
	sink, err := riversink.NewTx(db.insertOnly(b), riversink.Options{})
	if err != nil {
		b.Fatal(err)
	}
	noop := core.RelayFunc(func(context.Context, []core.Envelope) error { return nil })
	clearJobs := func() {
		if _, err := db.Exec(`TRUNCATE river_job`); err != nil {
			b.Fatal(err)
		}
	}
	for _, batchSize := range []int{100, 1000} {
		var noopRate float64
		b.Run(fmt.Sprintf("batch=%d/noop", batchSize), func(b *testing.B) {
			noopRate = drainBench(b, db.DB.DB, noop, batchSize, nil)
		})
		b.Run(fmt.Sprintf("batch=%d/river-tx", batchSize), func(b *testing.B) {
			rate := drainBench(b, db.DB.DB, sink, batchSize, clearJobs)
			if noopRate > 0 {
				b.ReportMetric(rate/noopRate, "x-noop")
			}
		})
	}
}

// drainBench publishes drainBenchMessages (untimed) and drains them through relay (timed)
// b.N times, reports msgs/s and returns it. before, when set, runs untimed before each
// drain.
func drainBench(b *testing.B, db *sql.DB, relay core.Relay, batchSize int, before func()) float64 {
	const n = drainBenchMessages
	ctx := context.Background()
	ob, err := core.New(core.Config{DB: db, Manual: true, Logger: slog.New(slog.DiscardHandler),
		Outboxes: map[string]core.OutboxConfig{"bench": {Relay: relay, BatchSize: batchSize}}})
	if err != nil {
		b.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	// Start every relay on a table cleared of the rows earlier runs deleted.
	if _, err := db.ExecContext(ctx, `VACUUM `+core.DefaultTable); err != nil {
		b.Fatal(err)
	}
	msgs := make([]core.Message, n)
	for i := range msgs {
		msgs[i] = core.Raw{To: "bench", Type: "bench.Event", Key: fmt.Sprintf("g%d", i%50), Data: fmt.Appendf(nil, `{"i":%d}`, i)}
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := ob.PublishAll(ctx, tx, msgs); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		if before != nil {
			before()
		}
		b.StartTimer()
		res, err := ob.Drain(ctx, "bench")
		if err != nil || res.Delivered != n {
			b.Fatalf("Drain = %+v, %v; want %d delivered", res, err, n)
		}
	}
	rate := float64(b.N*n) / b.Elapsed().Seconds()
	b.ReportMetric(rate, "msgs/s")
	return rate
}

const drainBenchMessages = 10_000
