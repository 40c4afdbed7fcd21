package kafka_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/otel/oteltest"
	"github.com/outboxer-go/outboxer/sinks/kafka"
)

// TestTraceContinuesToTheConsumer follows the trace of each message from the span it
// was published in, through the relay's send span, to a consumer that reads the record
// from Kafka and continues the trace from its headers.
func TestTraceContinuesToTheConsumer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newCluster(t, "orders")
	db := dbtest.Postgres(t)
	tr := oteltest.NewTraced(t, db.DB, "orders", newRelay(t, kafka.Config{Brokers: c.ListenAddrs(), Topic: "orders"}))

	// Two requests of the application, each publishing in its own span.
	published := oteltest.PublishInSpans(t, ctx, tr.TP, tr.Ob, db.DB, "orders")
	if res, err := tr.Ob.Drain(ctx, "orders"); err != nil || res.Delivered != 3 {
		t.Fatalf("Drain = %+v, %v; want 3 delivered", res, err)
	}

	// The consumer: reads the records and processes each in a span continuing its trace.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
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
			processed[id] = oteltest.Process(ctx, tr.TP, h)
		})
	}
	if len(processed) != 3 {
		t.Fatalf("consumed %d messages, want 3: %v", len(processed), ctx.Err())
	}
	oteltest.CheckTrace(t, tr.Spans.Ended(), "orders", published, processed)
}
