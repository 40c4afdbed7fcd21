package sqs_test

import (
	"context"
	"testing"

	"github.com/outboxer-go/outboxer/core"
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
