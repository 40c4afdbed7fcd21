// Package oteltest checks that a relay carries a publisher's trace to its consumers, for
// tests of relays and sinks: publish inside application spans with outboxerotel's hooks,
// deliver through outboxerotel.Relay, consume, start a span from the context extracted from
// what arrived, and hand the ended spans to CheckTrace.
package oteltest

import (
	"context"
	"database/sql"
	"strconv"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxer-go/outboxer/core"
	outboxerotel "github.com/outboxer-go/outboxer/otel"
)

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
