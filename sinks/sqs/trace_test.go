package sqs_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	outboxerotel "github.com/outboxer-go/outboxer/otel"
	"github.com/outboxer-go/outboxer/otel/oteltest"
	outboxsqs "github.com/outboxer-go/outboxer/sinks/sqs"
)

// TestTraceContinuesToTheConsumer follows the trace of each message from the span it
// was published in, through the relay's send span, to a consumer that receives it from a
// FIFO queue and continues the trace from its message attributes.
func TestTraceContinuesToTheConsumer(t *testing.T) {
	needEmulator(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	queue := newQueue(t, true)
	relay, err := outboxerotel.Relay(newRelay(t, outboxsqs.Config{Client: newClient(endpoint), QueueURL: queue, Table: "outboxer_messages"}),
		outboxerotel.WithTracerProvider(tp))
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

	// The consumer: receives the messages and processes each in a span continuing its
	// trace, from the headers the relay turned into message attributes.
	got, err := newReader(t, queue).Read(ctx, 3)
	if err != nil {
		t.Fatalf("received %d of 3 messages: %v", len(got), err)
	}
	consumer := tp.Tracer("billing")
	processed := map[int64]trace.SpanContext{} // message ID → the consumer's span
	for _, m := range got {
		if m.Headers["traceparent"] == "" {
			t.Errorf("message %d arrived without a traceparent attribute: %v", m.ID, m.Headers)
		}
		mctx := propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(m.Headers))
		_, span := consumer.Start(mctx, "process orders", trace.WithSpanKind(trace.SpanKindConsumer))
		span.End()
		processed[m.ID] = span.SpanContext()
	}
	oteltest.CheckTrace(t, spans.Ended(), "orders", published, processed)
}
