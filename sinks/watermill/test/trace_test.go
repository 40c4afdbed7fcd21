package watermillsink_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/otel/oteltest"
	watermillsink "github.com/outboxer-go/outboxer/sinks/watermill"
)

// TestTraceContinuesToTheSubscriber follows the trace of each message from the span it
// was published in, through the relay's send span and RabbitMQ, to a Watermill
// subscriber that continues the trace from the message's metadata.
func TestTraceContinuesToTheSubscriber(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := newRabbitQueue(t)
	sink, err := watermillsink.New(q.pub, watermillsink.Options{Topic: q.name})
	if err != nil {
		t.Fatal(err)
	}
	db := dbtest.Postgres(t)
	tr := oteltest.NewTraced(t, db.DB, "orders", sink)

	// Two requests of the application, each publishing in its own span.
	published := oteltest.PublishInSpans(t, ctx, tr.TP, tr.Ob, db.DB, "orders")
	received := q.consume(t, 3, 30*time.Second)
	if res, err := tr.Ob.Drain(ctx, "orders"); err != nil || res.Delivered != 3 {
		t.Fatalf("Drain = %+v, %v; want 3 delivered", res, err)
	}

	// The subscriber processes each message in a span continuing its trace.
	processed := map[int64]trace.SpanContext{} // message ID → the consumer's span
	msgs := <-received
	for _, msg := range msgs {
		id, err := strconv.ParseInt(msg.Metadata.Get(watermillsink.MetadataID), 10, 64)
		if err != nil {
			t.Fatalf("message without %s: %v", watermillsink.MetadataID, err)
		}
		processed[id] = oteltest.Process(msg.Context(), tr.TP, msg.Metadata)
	}
	if len(processed) != 3 {
		t.Fatalf("consumed %d messages, want 3", len(processed))
	}
	oteltest.CheckTrace(t, tr.Spans.Ended(), "orders", published, processed)
}
