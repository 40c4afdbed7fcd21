package outboxerotel_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"testing"
	"time"

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
// span). Every iteration drains once each way, in a rotating order, so both variants
// see the same machine; reported are the median rates and their ratio:
//
//	go test -run '^$' -bench DrainOverhead -benchtime 10x ./otel
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
		b.Run(fmt.Sprintf("batch-%d", batch), func(b *testing.B) {
			instance := func(relay core.Relay, hooks core.Hooks) *core.Outboxer {
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
			tp, mp := instrumentation(b)
			hooks, err := outboxerotel.Hooks(outboxerotel.WithTracerProvider(tp), outboxerotel.WithMeterProvider(mp))
			if err != nil {
				b.Fatal(err)
			}
			traced, err := outboxerotel.Relay(noop, outboxerotel.WithTracerProvider(tp))
			if err != nil {
				b.Fatal(err)
			}
			variants := []*core.Outboxer{instance(noop, core.Hooks{}), instance(traced, hooks)}
			filler := instance(noop, core.Hooks{})
			rates := [2][]float64{}
			turn := 0
			for b.Loop() {
				turn++
				for k := range variants {
					v := (k + turn) % len(variants)
					for i := 0; i < backlog; i += 1000 {
						if _, err := filler.PublishAll(ctx, db.DB, msgs[i:i+1000]); err != nil {
							b.Fatal(err)
						}
					}
					if _, err := db.ExecContext(ctx, `VACUUM ANALYZE `+core.DefaultTable); err != nil {
						b.Fatal(err)
					}
					start := time.Now()
					res, err := variants[v].Drain(ctx, "bench")
					if err != nil || res.Delivered != backlog {
						b.Fatalf("Drain = %+v, %v", res, err)
					}
					rates[v] = append(rates[v], backlog/time.Since(start).Seconds())
				}
			}
			median := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
			bare, instrumented := median(rates[0]), median(rates[1])
			b.ReportMetric(bare, "bare-msgs/s")
			b.ReportMetric(instrumented, "instrumented-msgs/s")
			b.ReportMetric(instrumented/bare, "instrumented/bare")
		})
	}
}

// BenchmarkPublishOverhead publishes one message per transaction on PostgreSQL inside
// the caller's span, bare and instrumented (Hooks: the publish span, its context in the
// headers, the published counter), the two in turn within every iteration; reported are
// the median transaction times and their ratio:
//
//	go test -run '^$' -bench PublishOverhead -benchtime 3000x ./otel
func BenchmarkPublishOverhead(b *testing.B) {
	db := dbtest.Postgres(b)
	tp, mp := instrumentation(b)
	ctx, span := tp.Tracer("app").Start(context.Background(), "request")
	defer span.End()
	instance := func(hooks core.Hooks) *core.Outboxer {
		ob, err := core.New(core.Config{DB: db.DB, PublishOnly: true, Logger: quiet, Hooks: hooks,
			Outboxes: map[string]core.OutboxConfig{"bench": {}}})
		if err != nil {
			b.Fatal(err)
		}
		if err := ob.Migrate(ctx); err != nil {
			b.Fatal(err)
		}
		return ob
	}
	hooks, err := outboxerotel.Hooks(outboxerotel.WithTracerProvider(tp), outboxerotel.WithMeterProvider(mp))
	if err != nil {
		b.Fatal(err)
	}
	variants := []*core.Outboxer{instance(core.Hooks{}), instance(hooks)}
	msg := core.Raw{To: "bench", Type: "bench.Event", Key: "g1", Data: []byte(`{"i":1}`)}
	publish := func(ob *core.Outboxer) func() error {
		return func() error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if _, err := ob.Publish(ctx, tx, msg); err != nil {
				return err
			}
			return tx.Commit()
		}
	}
	med := dbtest.Interleave(b, publish(variants[0]), publish(variants[1]))
	bare, instrumented := dbtest.Micros(med[0]), dbtest.Micros(med[1])
	b.ReportMetric(bare, "bare-µs")
	b.ReportMetric(instrumented, "instrumented-µs")
	b.ReportMetric(instrumented/bare, "instrumented/bare")
}
