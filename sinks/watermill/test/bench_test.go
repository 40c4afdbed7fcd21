package watermillsink_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	watermillsink "github.com/outboxer-go/outboxer/sinks/watermill"
)

// BenchmarkDeliver measures batches of 100 delivered directly through the sink, against
// a relay that does nothing, in the same run. Compare msgs/s between the sub-benchmarks.
func BenchmarkDeliver(b *testing.B) {
	const batchSize = 100
	batch := envelopes(1, batchSize, 10)
	run := func(b *testing.B, relay core.Relay) {
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if err := relay.Deliver(ctx, batch); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*batchSize)/b.Elapsed().Seconds(), "msgs/s")
	}
	sink := func(b *testing.B, pub message.Publisher, runSize int) core.Relay {
		s, err := watermillsink.New(pub, watermillsink.Options{Topic: "bench", PublishBatchSize: runSize})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}

	b.Run("noop", func(b *testing.B) {
		run(b, core.RelayFunc(func(context.Context, []core.Envelope) error { return nil }))
	})
	b.Run("gochannel", func(b *testing.B) {
		pubsub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
		defer pubsub.Close()
		run(b, sink(b, pubsub, 1))
	})
	for _, runSize := range []int{1, 100} {
		name := map[int]string{1: "rabbitmq-confirm/one-per-call", 100: "rabbitmq-confirm/runs-of-100"}[runSize]
		b.Run(name, func(b *testing.B) {
			q := newRabbitQueue(b)
			run(b, sink(b, q.pub, runSize))
		})
	}
}

// BenchmarkEngineDrain drains 10,000 messages per iteration through the engine (Manual
// mode, Drain) on PostgreSQL, in the same run and database: with a relay that does
// nothing, then with the sink publishing to GoChannel (a subscriber acking every
// message) and to RabbitMQ (publisher confirms, runs of 100). msgs/s is the drain rate
// (publishing into the outbox is not timed); x-noop is the rate over the no-op relay's.
func BenchmarkEngineDrain(b *testing.B) {
	db := dbtest.Postgres(b)
	const batchSize = 1000
	var noopRate float64
	b.Run("noop", func(b *testing.B) {
		noopRate = drainBench(b, db.DB, core.RelayFunc(func(context.Context, []core.Envelope) error { return nil }), batchSize)
	})
	compare := func(b *testing.B, relay core.Relay) {
		if rate := drainBench(b, db.DB, relay, batchSize); noopRate > 0 {
			b.ReportMetric(rate/noopRate, "x-noop")
		}
	}
	b.Run("gochannel", func(b *testing.B) {
		pubsub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1024}, watermill.NopLogger{})
		defer pubsub.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		msgs, err := pubsub.Subscribe(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			for m := range msgs {
				m.Ack()
			}
		}()
		sink, err := watermillsink.New(pubsub, watermillsink.Options{Topic: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		compare(b, sink)
	})
	b.Run("rabbitmq-confirm/runs-of-100", func(b *testing.B) {
		q := newRabbitQueue(b)
		sink, err := watermillsink.New(q.pub, watermillsink.Options{Topic: q.name, PublishBatchSize: 100})
		if err != nil {
			b.Fatal(err)
		}
		compare(b, sink)
	})
}

// drainBench publishes 10,000 messages (untimed) and drains them through relay (timed)
// b.N times, reports msgs/s and returns it.
func drainBench(b *testing.B, db *sql.DB, relay core.Relay, batchSize int) float64 {
	const n = 10_000
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
