package sqs_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/outboxer-go/outboxer/dbtest"
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
	queue := newQueue(t, true)
	db := dbtest.Postgres(t)
	tr := oteltest.NewTraced(t, db.DB, "orders",
		newRelay(t, outboxsqs.Config{Client: newClient(endpoint), QueueURL: queue, Table: "outboxer_messages"}))

	// Two requests of the application, each publishing in its own span.
	published := oteltest.PublishInSpans(t, ctx, tr.TP, tr.Ob, db.DB, "orders")
	if res, err := tr.Ob.Drain(ctx, "orders"); err != nil || res.Delivered != 3 {
		t.Fatalf("Drain = %+v, %v; want 3 delivered", res, err)
	}

	// The consumer processes each message in a span continuing its trace, from the
	// headers the relay turned into message attributes.
	got, err := newReader(t, queue).Read(ctx, 3)
	if err != nil {
		t.Fatalf("received %d of 3 messages: %v", len(got), err)
	}
	processed := map[int64]trace.SpanContext{} // message ID → the consumer's span
	for _, m := range got {
		if m.Headers["traceparent"] == "" {
			t.Errorf("message %d arrived without a traceparent attribute: %v", m.ID, m.Headers)
		}
		processed[m.ID] = oteltest.Process(ctx, tr.TP, m.Headers)
	}
	oteltest.CheckTrace(t, tr.Spans.Ended(), "orders", published, processed)
}
