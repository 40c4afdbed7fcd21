package watermillsink_test

import (
	"context"
	"log/slog"
	"strconv"
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
	watermillsink "github.com/outboxer-go/outboxer/sinks/watermill"
)

// TestTraceContinuesToTheSubscriber follows the trace of each message from the span it
// was published in, through the relay's send span and RabbitMQ, to a Watermill
// subscriber that continues the trace from the message's metadata.
func TestTraceContinuesToTheSubscriber(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	q := newRabbitQueue(t)
	sink, err := watermillsink.New(q.pub, watermillsink.Options{Topic: q.name})
	if err != nil {
		t.Fatal(err)
	}
	relay, err := outboxerotel.Relay(sink, outboxerotel.WithTracerProvider(tp))
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
	received := q.consume(t, 3, 30*time.Second)
	if res, err := ob.Drain(ctx, "orders"); err != nil || res.Delivered != 3 {
		t.Fatalf("Drain = %+v, %v; want 3 delivered", res, err)
	}

	// The subscriber processes each message in a span continuing its trace.
	consumer := tp.Tracer("billing")
	processed := map[int64]trace.SpanContext{} // message ID → the consumer's span
	msgs := <-received
	for _, msg := range msgs {
		id, err := strconv.ParseInt(msg.Metadata.Get(watermillsink.MetadataID), 10, 64)
		if err != nil {
			t.Fatalf("message without %s: %v", watermillsink.MetadataID, err)
		}
		mctx := propagation.TraceContext{}.Extract(msg.Context(), propagation.MapCarrier(msg.Metadata))
		_, span := consumer.Start(mctx, "process orders", trace.WithSpanKind(trace.SpanKindConsumer))
		span.End()
		processed[id] = span.SpanContext()
	}
	if len(processed) != 3 {
		t.Fatalf("consumed %d messages, want 3", len(processed))
	}
	oteltest.CheckTrace(t, spans.Ended(), "orders", published, processed)
}
