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
	app := tp.Tracer("shop")
	published := map[int64]trace.SpanContext{} // message ID → the application's span
	for i, n := range []int{1, 2} {
		reqCtx, req := app.Start(ctx, "place order "+strconv.Itoa(i))
		tx, err := db.BeginTx(reqCtx, nil)
		if err != nil {
			t.Fatal(err)
		}
		msgs := make([]core.Message, n)
		for k := range msgs {
			msgs[k] = core.Raw{To: "orders", Type: "order.placed", Key: "order:" + strconv.Itoa(i), Data: []byte(`{}`)}
		}
		envs, err := ob.PublishAll(reqCtx, tx, msgs)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		req.End()
		for _, env := range envs {
			published[env.ID] = req.SpanContext()
		}
	}
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
	checkTrace(t, spans.Ended(), published, processed)
}

// checkTrace checks, for every message, that the consumer's span is in the trace of the
// application's span that published it, a child of the publish span that is itself the
// application span's child, and that the send span links to that publish span.
func checkTrace(t *testing.T, ended []sdktrace.ReadOnlySpan, published, processed map[int64]trace.SpanContext) {
	t.Helper()
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	var sends []sdktrace.ReadOnlySpan
	for _, s := range ended {
		byID[s.SpanContext().SpanID()] = s
		if s.Name() == "send orders" {
			sends = append(sends, s)
		}
	}
	if len(sends) == 0 {
		t.Fatal("no send span")
	}
	for id, app := range published {
		got, ok := processed[id]
		if !ok {
			t.Errorf("message %d was not consumed", id)
			continue
		}
		if got.TraceID() != app.TraceID() {
			t.Errorf("message %d: consumer span in trace %v, want the publisher's %v", id, got.TraceID(), app.TraceID())
		}
		consumerSpan := byID[got.SpanID()]
		create, ok := byID[consumerSpan.Parent().SpanID()]
		if !ok {
			t.Errorf("message %d: the consumer span's parent %v is no span of ours", id, consumerSpan.Parent().SpanID())
			continue
		}
		if create.Name() != "create orders" || create.SpanKind() != trace.SpanKindProducer || create.Parent().SpanID() != app.SpanID() {
			t.Errorf("message %d: consumer span's parent is %q (%v), child of %v; want the create span, child of the application's span %v",
				id, create.Name(), create.SpanKind(), create.Parent().SpanID(), app.SpanID())
		}
		found := false
		for _, s := range sends {
			for _, l := range s.Links() {
				found = found || l.SpanContext.SpanID() == create.SpanContext().SpanID()
			}
		}
		if !found {
			t.Errorf("message %d: no send span links to its create span %v", id, create.SpanContext().SpanID())
		}
	}
}
