package riversink_test

import (
	"context"
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
