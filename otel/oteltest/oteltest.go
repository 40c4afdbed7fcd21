// Package oteltest checks that a relay carries a publisher's trace to its consumers, for
// tests of relays and sinks: set up a traced instance (NewTraced), publish inside
// application spans (PublishInSpans), deliver, consume, process what arrived in a span
// continuing its trace (Process), and hand the ended spans to CheckTrace.
package oteltest

import (
	"context"
	"database/sql"
	"log/slog"
	"strconv"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxer-go/outboxer/core"
	outboxerotel "github.com/outboxer-go/outboxer/otel"
)

// Traced is a tracer provider that records every span it ends, and an outbox instance
// traced on it.
type Traced struct {
	TP    *sdktrace.TracerProvider
	Spans *tracetest.SpanRecorder
	Ob    *core.Outboxer
}

// NewTraced returns a tracer provider that samples and records every span (shut down
// when t ends), and an instance in manual mode on db, its table migrated, with
// outboxerotel's hooks and, as the relay of outbox, relay wrapped with
// outboxerotel.Relay, both on that provider.
func NewTraced(t testing.TB, db *sql.DB, outbox string, relay core.Relay) *Traced {
	t.Helper()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	traced, err := outboxerotel.Relay(relay, outboxerotel.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	hooks, err := outboxerotel.Hooks(outboxerotel.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	ob, err := core.New(core.Config{DB: db, Manual: true, Hooks: hooks, Logger: slog.New(slog.DiscardHandler),
		Outboxes: map[string]core.OutboxConfig{outbox: {Relay: traced}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &Traced{TP: tp, Spans: spans, Ob: ob}
}

// Process is a consumer processing one message: it starts and ends a CONSUMER span of
// tp's tracer "billing" in the trace context extracted from the message's headers (W3C
// trace context), and returns the span's context, as CheckTrace takes it.
func Process(ctx context.Context, tp trace.TracerProvider, headers map[string]string) trace.SpanContext {
	ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(headers))
	_, span := tp.Tracer("billing").Start(ctx, "process", trace.WithSpanKind(trace.SpanKindConsumer))
	span.End()
	return span.SpanContext()
}

// PublishInSpans publishes three messages into outbox as two requests of an application
// would: each request in a span of tp's tracer "shop", publishing one and two messages of
// its own group in a transaction on db. It returns, per message ID, the span context of
// the request that published it, as CheckTrace takes it. ob must have been given
// outboxerotel's hooks on the same tp.
func PublishInSpans(t testing.TB, ctx context.Context, tp trace.TracerProvider, ob *core.Outboxer, db *sql.DB, outbox string) map[int64]trace.SpanContext {
	t.Helper()
	app := tp.Tracer("shop")
	published := map[int64]trace.SpanContext{}
	for i, n := range []int{1, 2} {
		reqCtx, req := app.Start(ctx, "place order "+strconv.Itoa(i))
		tx, err := db.BeginTx(reqCtx, nil)
		if err != nil {
			t.Fatal(err)
		}
		msgs := make([]core.Message, n)
		for k := range msgs {
			msgs[k] = core.Raw{To: outbox, Type: "order.placed", Key: "order:" + strconv.Itoa(i), Data: []byte(`{}`)}
		}
		envs, err := ob.PublishAll(reqCtx, tx, msgs)
		if err != nil {
			_ = tx.Rollback()
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
	return published
}

// CheckTrace checks, for every message of published (outbox message ID → the span
// context of the application span that published it), that the consumer's span in
// processed (ID → the span the consumer started from the context it extracted) is in the
// publisher's trace, a child of the "create <outbox>" span that is itself the application
// span's child, and that a "send <outbox>" span links to that create span (and, when the
// instance had outboxerotel's hooks, is the child of a batch span). ended is what
// the test's span recorder (go.opentelemetry.io/otel/sdk/trace/tracetest) ended.
func CheckTrace(t testing.TB, ended []sdktrace.ReadOnlySpan, outbox string, published, processed map[int64]trace.SpanContext) {
	t.Helper()
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	var sends []sdktrace.ReadOnlySpan
	for _, s := range ended {
		byID[s.SpanContext().SpanID()] = s
		if s.Name() == "send "+outbox {
			sends = append(sends, s)
		}
	}
	if len(sends) == 0 {
		t.Fatalf("no %q span", "send "+outbox)
	}
	// With outboxerotel's hooks on the instance, each delivery runs in its batch's span.
	if hasBatchSpans(ended) {
		for _, s := range sends {
			if p, ok := byID[s.Parent().SpanID()]; !ok || p.Name() != outboxerotel.SpanBatch {
				t.Errorf("send span %v: parent %v is not an %s span", s.SpanContext().SpanID(), s.Parent().SpanID(), outboxerotel.SpanBatch)
			}
		}
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
		if create.Name() != "create "+outbox || create.SpanKind() != trace.SpanKindProducer || create.Parent().SpanID() != app.SpanID() {
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

func hasBatchSpans(ended []sdktrace.ReadOnlySpan) bool {
	for _, s := range ended {
		if s.Name() == outboxerotel.SpanBatch {
			return true
		}
	}
	return false
}
