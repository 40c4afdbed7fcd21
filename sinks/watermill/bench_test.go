package watermillsink_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/outboxer-go/outboxer/core"
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
