package sqs_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"testing"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	outboxsqs "github.com/outboxer-go/outboxer/sinks/sqs"
	"github.com/outboxer-go/outboxer/sinktest"
)

// BenchmarkDeliver compares the relay, sending to the SQS emulator on loopback, with a
// relay that does nothing, in batches of 100 messages of 20 groups. Compare msgs/s.
func BenchmarkDeliver(b *testing.B) {
	envs := sinktest.Envelopes(100, 20)
	run := func(b *testing.B, r core.Relay) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			for i := range envs { // new IDs each round, as the engine would hand
				envs[i].ID += int64(len(envs))
			}
			if err := r.Deliver(ctx, envs); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*len(envs))/b.Elapsed().Seconds(), "msgs/s")
	}
	b.Run("noop", func(b *testing.B) {
		run(b, core.RelayFunc(func(context.Context, []core.Envelope) error { return nil }))
	})
	b.Run("sqs", func(b *testing.B) {
		needEmulator(b)
		queue := newQueue(b, true)
		relay := newRelay(b, outboxsqs.Config{Client: newClient(endpoint), QueueURL: queue, Table: "bench"})
		run(b, relay)
	})
}

// BenchmarkEngineDrain drains a backlog of 100,000 messages (50 groups) per iteration
// through the engine (Manual mode, Drain, batches of 1,000) on PostgreSQL, first with a
// relay that does nothing, then with the relay sending to a FIFO queue of the SQS
// emulator on loopback (SendMessageBatch of 10), in the same run and database. msgs/s
// is the drain rate (publishing the backlog is not timed); x-noop is the SQS relay's
// rate over the no-op relay's. The emulator, not SQS, bounds the SQS rate here: the
// ratio measures the relay against this emulator, not against the service.
func BenchmarkEngineDrain(b *testing.B) {
	db := dbtest.Postgres(b)
	var noopRate float64
	b.Run("noop", func(b *testing.B) {
		noopRate = drainBench(b, db.DB, core.RelayFunc(func(context.Context, []core.Envelope) error { return nil }))
	})
	b.Run("sqs", func(b *testing.B) {
		needEmulator(b)
		queue := newQueue(b, true)
		relay := newRelay(b, outboxsqs.Config{Client: newClient(endpoint), QueueURL: queue, Table: core.DefaultTable})
		rate := drainBench(b, db.DB, relay)
		if noopRate > 0 {
			b.ReportMetric(rate/noopRate, "x-noop")
		}
	})
}

const (
	drainBenchMessages = 100_000
	drainBenchBatch    = 1_000
	publishChunk       = 10_000 // messages per publishing transaction
)

// drainBench publishes drainBenchMessages (untimed, in transactions of publishChunk) and
// drains them through relay (timed) b.N times, reports msgs/s and returns it.
func drainBench(b *testing.B, db *sql.DB, relay core.Relay) float64 {
	ctx := context.Background()
	ob, err := core.New(core.Config{DB: db, Manual: true, Logger: slog.New(slog.DiscardHandler),
		Outboxes: map[string]core.OutboxConfig{"bench": {Relay: relay, BatchSize: drainBenchBatch}}})
	if err != nil {
		b.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	msgs := make([]core.Message, publishChunk)
	for i := range msgs {
		msgs[i] = core.Raw{To: "bench", Type: "bench.Event", Key: fmt.Sprintf("g%d", i%50), Data: fmt.Appendf(nil, `{"i":%d}`, i)}
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		for range drainBenchMessages / publishChunk {
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
		}
		// Every drain starts on a table cleared of the rows earlier drains deleted, with
		// fresh statistics for the backlog.
		if _, err := db.ExecContext(ctx, `VACUUM ANALYZE `+core.DefaultTable); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		res, err := ob.Drain(ctx, "bench")
		if err != nil || res.Delivered != drainBenchMessages {
			b.Fatalf("Drain = %+v, %v; want %d delivered", res, err, drainBenchMessages)
		}
	}
	rate := float64(b.N*drainBenchMessages) / b.Elapsed().Seconds()
	b.ReportMetric(rate, "msgs/s")
	return rate
}
