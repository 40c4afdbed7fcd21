package outboxerotel_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	outboxerotel "github.com/outboxer-go/outboxer/otel"
)

// discard is a span exporter that drops what it is given, as a collector far away costs
// the process nothing more than the batching.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// instrumentation is a real SDK pipeline: every span sampled and batched to an exporter
// that discards, metrics aggregated for a reader that is never collected.
func instrumentation(b *testing.B) (*sdktrace.TracerProvider, *sdkmetric.MeterProvider) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	return tp, mp
}

func traceparent() string {
	var id [24]byte
	_, _ = rand.Read(id[:])
	h := hex.EncodeToString(id[:])
	return "00-" + h[:32] + "-" + h[32:] + "-01"
}

// BenchmarkDrainOverhead drains the same backlog on PostgreSQL (20,000 messages of 50
// groups, each with a trace context of its own, as traced publishing leaves them)
// through the engine with a relay that does nothing, bare and instrumented (Hooks with
// metrics and spans, the relay wrapped by Relay, an SDK tracer provider sampling every
// span). Run with -count to interleave the two:
//
//	go test -run '^$' -bench DrainOverhead -benchtime 5x -count 5 ./otel
func BenchmarkDrainOverhead(b *testing.B) {
	const backlog = 20_000
	db := dbtest.Postgres(b)
	ctx := context.Background()
	noop := core.RelayFunc(func(context.Context, []core.Envelope) error { return nil })
	msgs := make([]core.Message, backlog)
	for i := range msgs {
		msgs[i] = core.Raw{To: "bench", Type: "bench.Event", Key: fmt.Sprintf("g%d", i%50),
			Data: fmt.Appendf(nil, `{"i":%d}`, i), Header: map[string]string{"traceparent": traceparent()}}
	}
	for _, batch := range []int{100, 1000} {
		instance := func(b *testing.B, relay core.Relay, hooks core.Hooks) *core.Outboxer {
			ob, err := core.New(core.Config{DB: db.DB, Manual: true, Logger: quiet, Hooks: hooks,
				Outboxes: map[string]core.OutboxConfig{"bench": {Relay: relay, BatchSize: batch}}})
			if err != nil {
				b.Fatal(err)
			}
			if err := ob.Migrate(ctx); err != nil {
				b.Fatal(err)
			}
			return ob
		}
		drain := func(b *testing.B, ob *core.Outboxer) {
			filler := instance(b, noop, core.Hooks{})
			for b.Loop() {
				b.StopTimer()
				for i := 0; i < backlog; i += 1000 {
					if _, err := filler.PublishAll(ctx, db.DB, msgs[i:i+1000]); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := db.ExecContext(ctx, `VACUUM ANALYZE `+core.DefaultTable); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				res, err := ob.Drain(ctx, "bench")
				if err != nil || res.Delivered != backlog {
					b.Fatalf("Drain = %+v, %v", res, err)
				}
			}
			b.ReportMetric(float64(backlog*b.N)/b.Elapsed().Seconds(), "msgs/s")
		}
		b.Run(fmt.Sprintf("batch-%d/bare", batch), func(b *testing.B) {
			drain(b, instance(b, noop, core.Hooks{}))
		})
		b.Run(fmt.Sprintf("batch-%d/instrumented", batch), func(b *testing.B) {
			tp, mp := instrumentation(b)
			hooks, err := outboxerotel.Hooks(outboxerotel.WithTracerProvider(tp), outboxerotel.WithMeterProvider(mp))
			if err != nil {
				b.Fatal(err)
			}
			relay, err := outboxerotel.Relay(noop, outboxerotel.WithTracerProvider(tp))
			if err != nil {
				b.Fatal(err)
			}
			drain(b, instance(b, relay, hooks))
		})
	}
}

// BenchmarkPublishOverhead publishes one message per transaction on PostgreSQL inside
// the caller's span, bare and instrumented (Hooks: the publish span, its context in the
// headers, the published counter). Run with -count to interleave the two:
//
//	go test -run '^$' -bench PublishOverhead -benchtime 3000x -count 5 ./otel
func BenchmarkPublishOverhead(b *testing.B) {
	db := dbtest.Postgres(b)
	tp, mp := instrumentation(b)
	ctx, span := tp.Tracer("app").Start(context.Background(), "request")
	defer span.End()
	run := func(b *testing.B, hooks core.Hooks) {
		ob, err := core.New(core.Config{DB: db.DB, PublishOnly: true, Logger: quiet, Hooks: hooks,
			Outboxes: map[string]core.OutboxConfig{"bench": {}}})
		if err != nil {
			b.Fatal(err)
		}
		if err := ob.Migrate(ctx); err != nil {
			b.Fatal(err)
		}
		msg := core.Raw{To: "bench", Type: "bench.Event", Key: "g1", Data: []byte(`{"i":1}`)}
		b.ReportAllocs()
		for b.Loop() {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := ob.Publish(ctx, tx, msg); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := db.ExecContext(ctx, `DELETE FROM `+core.DefaultTable); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("bare", func(b *testing.B) { run(b, core.Hooks{}) })
	b.Run("instrumented", func(b *testing.B) {
		hooks, err := outboxerotel.Hooks(outboxerotel.WithTracerProvider(tp), outboxerotel.WithMeterProvider(mp))
		if err != nil {
			b.Fatal(err)
		}
		run(b, hooks)
	})
}
