package kafka_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	outboxerotel "github.com/outboxer-go/outboxer/otel"
	"github.com/outboxer-go/outboxer/otel/oteltest"
	"github.com/outboxer-go/outboxer/sinks/kafka"
)

// TestTraceContinuesToTheConsumer follows the trace of each message from the span it
// was published in, through the relay's send span, to a consumer that reads the record
// from Kafka and continues the trace from its headers.
func TestTraceContinuesToTheConsumer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	c := newCluster(t, "orders")
	relay, err := outboxerotel.Relay(newRelay(t, kafka.Config{Brokers: c.ListenAddrs(), Topic: "orders"}), outboxerotel.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	hooks, err := outboxerotel.Hooks(outboxerotel.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	db := dbtest.Postgres(t)
	ob, err := core.New(core.Config{DB: db.DB, Manual: true, Hooks: hooks, Logger: slog.New(slog.DiscardHandler),
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: relay}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	// Two requests of the application, each publishing in its own span.
	published := oteltest.PublishInSpans(t, ctx, tp, ob, db.DB, "orders")
	if res, err := ob.Drain(ctx, "orders"); err != nil || res.Delivered != 3 {
		t.Fatalf("Drain = %+v, %v; want 3 delivered", res, err)
	}

	// The consumer: reads the records and processes each in a span continuing its trace.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	consumer := tp.Tracer("billing")
	processed := map[int64]trace.SpanContext{} // message ID → the consumer's span
	for len(processed) < 3 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(rec *kgo.Record) {
			h := map[string]string{}
			for _, rh := range rec.Headers {
				h[rh.Key] = string(rh.Value)
			}
			id, err := strconv.ParseInt(h[kafka.HeaderID], 10, 64)
			if err != nil {
				t.Errorf("record without %s: %v", kafka.HeaderID, err)
				return
			}
			rctx := propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(h))
			_, span := consumer.Start(rctx, "process orders", trace.WithSpanKind(trace.SpanKindConsumer))
			span.End()
			processed[id] = span.SpanContext()
		})
	}
	if len(processed) != 3 {
		t.Fatalf("consumed %d messages, want 3: %v", len(processed), ctx.Err())
	}
	oteltest.CheckTrace(t, spans.Ended(), "orders", published, processed)
}
