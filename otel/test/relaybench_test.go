package outboxerotel_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/outboxer-go/outboxer/core"
	outboxerotel "github.com/outboxer-go/outboxer/otel"
)

// BenchmarkRelayDeliver measures what the wrapper adds to one Deliver of 100 messages,
// each with a trace context of its own, over a relay that does nothing:
//
//	go test -run '^$' -bench RelayDeliver ./otel
func BenchmarkRelayDeliver(b *testing.B) {
	batch := make([]core.Envelope, 100)
	for i := range batch {
		batch[i] = core.Envelope{ID: int64(i + 1), Outbox: "bench", GroupKey: fmt.Sprint("g", i%10),
			Headers: map[string]string{"traceparent": traceparent()}}
	}
	noop := core.RelayFunc(func(context.Context, []core.Envelope) error { return nil })
	ctx := context.Background()
	run := func(b *testing.B, r core.Relay) {
		b.ReportAllocs()
		for b.Loop() {
			if err := r.Deliver(ctx, batch); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("bare", func(b *testing.B) { run(b, noop) })
	b.Run("wrapped", func(b *testing.B) {
		tp, _ := instrumentation(b)
		r, err := outboxerotel.Relay(noop, outboxerotel.WithTracerProvider(tp))
		if err != nil {
			b.Fatal(err)
		}
		run(b, r)
	})
}
