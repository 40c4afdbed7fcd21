package kafka_test

import (
	"context"
	"testing"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/sinks/kafka"
	"github.com/outboxer-go/outboxer/sinktest"
)

// BenchmarkDeliver compares the relay, writing to an in-process Kafka cluster, with a
// relay that does nothing, in batches of 100 messages of 20 groups. Compare msgs/s.
func BenchmarkDeliver(b *testing.B) {
	envs := sinktest.Envelopes(100, 20)
	run := func(b *testing.B, r core.Relay) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if err := r.Deliver(ctx, envs); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*len(envs))/b.Elapsed().Seconds(), "msgs/s")
	}
	b.Run("noop", func(b *testing.B) {
		run(b, core.RelayFunc(func(context.Context, []core.Envelope) error { return nil }))
	})
	b.Run("kafka", func(b *testing.B) {
		c := newCluster(b, "events")
		run(b, newRelay(b, kafka.Config{Brokers: c.ListenAddrs(), Topic: "events"}))
	})
}
