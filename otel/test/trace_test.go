package outboxerotel_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	outboxerotel "github.com/outboxer-go/outboxer/otel"
)

// spanRelay is a relay that records, per call, the batch and the span of its context.
type spanRelay struct {
	mu    sync.Mutex
	spans []trace.SpanContext
	envs  [][]core.Envelope
	err   error // returned by every call
}

func (r *spanRelay) Deliver(ctx context.Context, batch []core.Envelope) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans = append(r.spans, trace.SpanContextFromContext(ctx))
	r.envs = append(r.envs, batch)
	return r.err
}

// tracedInstance is a Manual instance on SQLite with the tracing hooks and the relay
// wrapped.
func tracedInstance(t *testing.T, tel *telemetry, inner core.Relay, hookOpts, relayOpts []outboxerotel.Option) (*core.Outboxer, *dbtest.DB) {
	t.Helper()
	relay, err := outboxerotel.Relay(inner, append([]outboxerotel.Option{outboxerotel.WithTracerProvider(tel.tracer)}, relayOpts...)...)
	if err != nil {
		t.Fatalf("Relay: %v", err)
	}
	db := dbtest.SQLite(t)
	ob, err := core.New(core.Config{DB: db.DB, Manual: true, Logger: quiet, Hooks: tel.hooks(t, hookOpts...),
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: relay}}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := ob.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return ob, db
}

func spansNamed(tel *telemetry, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tel.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func linked(s sdktrace.ReadOnlySpan) []trace.SpanContext {
	var out []trace.SpanContext
	for _, l := range s.Links() {
		out = append(out, l.SpanContext)
	}
	return out
}

func TestPublishSpanIsStoredAndLinkedByTheSendSpan(t *testing.T) {
	ctx := context.Background()
	tel := newTelemetry(t)
	inner := &spanRelay{}
	ob, db := tracedInstance(t, tel, inner, nil, nil)

	// Publish inside the caller's span.
	parentCtx, parent := tel.tracer.Tracer("app").Start(ctx, "handle order")
	tx, err := db.BeginTx(parentCtx, nil)
	if err != nil {
		t.Fatal(err)
	}
	env, err := ob.Publish(parentCtx, tx, event{Box: "orders", Seq: 1})
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	// Three messages of one call share one publish span.
	all, err := ob.PublishAll(parentCtx, tx, []core.Message{event{Box: "orders", Seq: 2}, event{Box: "orders", Seq: 3}, event{Box: "orders", Seq: 4}})
	if err != nil {
		t.Fatalf("PublishAll: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	parent.End()

	creates := spansNamed(tel, "create orders")
	if len(creates) != 2 {
		t.Fatalf("%d create spans, want 2 (one per call)", len(creates))
	}
	one, three := creates[0], creates[1]
	for _, s := range creates {
		if s.SpanKind() != trace.SpanKindProducer {
			t.Errorf("create span kind %v, want producer", s.SpanKind())
		}
		if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("create span's parent is %v, want the caller's span %v", s.Parent().SpanID(), parent.SpanContext().SpanID())
		}
		if got := spanAttr(s, outboxerotel.AttrMessagingOperationType).AsString(); got != "create" {
			t.Errorf("messaging.operation.type = %q, want create", got)
		}
		if got := spanAttr(s, outboxerotel.AttrMessagingDestination).AsString(); got != "orders" {
			t.Errorf("messaging.destination.name = %q, want orders", got)
		}
		if got := spanAttr(s, outboxerotel.AttrMessagingSystem).AsString(); got != outboxerotel.MessagingSystem {
			t.Errorf("messaging.system = %q", got)
		}
	}
	if got := spanAttr(one, outboxerotel.AttrMessagingMessageID).AsString(); got != fmt.Sprint(env.ID) {
		t.Errorf("messaging.message.id = %q, want %d", got, env.ID)
	}
	if got := spanAttr(three, outboxerotel.AttrMessagingBatchCount).AsInt64(); got != 3 {
		t.Errorf("messaging.batch.message_count = %d, want 3", got)
	}
	// The stored headers carry the publish span's W3C context.
	traceparent := func(s sdktrace.ReadOnlySpan) string {
		sc := s.SpanContext()
		return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	}
	pending, err := ob.ListPending(ctx, "orders", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 4 {
		t.Fatalf("%d pending, want 4", len(pending))
	}
	for i, p := range pending {
		want := traceparent(three)
		if i == 0 {
			want = traceparent(one)
		}
		if got := p.Headers["traceparent"]; got != want {
			t.Errorf("message %d traceparent = %q, want %q", p.ID, got, want)
		}
	}
	if all[0].Headers["traceparent"] != traceparent(three) {
		t.Errorf("PublishAll returned headers %v", all[0].Headers)
	}

	// Delivery: one send span, linking each distinct publish context once, whose context
	// the inner relay gets.
	if res, err := ob.Drain(ctx, "orders"); err != nil || res.Delivered != 4 {
		t.Fatalf("Drain = %+v, %v", res, err)
	}
	sends := spansNamed(tel, "send orders")
	if len(sends) != 1 {
		t.Fatalf("%d send spans, want 1", len(sends))
	}
	send := sends[0]
	if send.SpanKind() != trace.SpanKindClient {
		t.Errorf("send span kind %v, want client (the create spans are the creation context)", send.SpanKind())
	}
	links := linked(send)
	if len(links) != 2 || !links[0].Equal(one.SpanContext().WithRemote(true)) || !links[1].Equal(three.SpanContext().WithRemote(true)) {
		t.Errorf("send span links %v, want the two create spans %v, %v", links, one.SpanContext(), three.SpanContext())
	}
	if got := spanAttr(send, outboxerotel.AttrMessagingBatchCount).AsInt64(); got != 4 {
		t.Errorf("send span messaging.batch.message_count = %d, want 4", got)
	}
	if send.Status().Code != codes.Unset {
		t.Errorf("send span status %+v, want unset", send.Status())
	}
	if len(inner.spans) != 1 || inner.spans[0].SpanID() != send.SpanContext().SpanID() {
		t.Errorf("the inner relay's context carries span %v, want the send span %v", inner.spans, send.SpanContext().SpanID())
	}
	// The headers reach the inner relay untouched.
	if got := inner.envs[0][0].Headers["traceparent"]; got != traceparent(one) {
		t.Errorf("inner relay got traceparent %q, want %q", got, traceparent(one))
	}
	// The engine's telemetry names the wrapped relay, and its batch span is the send
	// span's parent: one trace per batch.
	batches := spansNamed(tel, outboxerotel.SpanBatch)
	if len(batches) != 1 || spanAttr(batches[0], outboxerotel.AttrRelay).AsString() != "*outboxerotel_test.spanRelay" {
		t.Fatalf("batch span's relay attribute: %v", batches)
	}
	if batch := batches[0].SpanContext(); send.Parent().SpanID() != batch.SpanID() || send.SpanContext().TraceID() != batch.TraceID() {
		t.Errorf("send span's parent %v in trace %v, want the batch span %v in %v",
			send.Parent().SpanID(), send.SpanContext().TraceID(), batch.SpanID(), batch.TraceID())
	}
}

func TestPublishSpanKeepsTheMessagesOwnHeaderAndRecordsFailure(t *testing.T) {
	ctx := context.Background()
	tel := newTelemetry(t)
	ob, db := tracedInstance(t, tel, &spanRelay{}, nil, nil)
	own := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	env, err := ob.Publish(ctx, db.DB, core.Raw{To: "orders", Type: "t", Data: []byte(`{}`), Header: map[string]string{"traceparent": own}})
	if err != nil {
		t.Fatal(err)
	}
	if env.Headers["traceparent"] != own {
		t.Errorf("traceparent = %q, want the message's own %q", env.Headers["traceparent"], own)
	}
	// A refused publish ends its span with the error.
	_, pubErr := ob.Publish(ctx, db.DB, event{Box: "nowhere"})
	if !errors.Is(pubErr, core.ErrUnknownOutbox) {
		t.Fatalf("Publish to an unknown outbox: %v", pubErr)
	}
	failed := spansNamed(tel, "create nowhere")
	if len(failed) != 1 || failed[0].Status().Code != codes.Error || failed[0].Status().Description != pubErr.Error() {
		t.Fatalf("create span of the refused publish: %v", failed)
	}
	// The message's own context is the one the send span links to.
	if _, err := ob.Drain(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	sends := spansNamed(tel, "send orders")
	if len(sends) != 1 || len(sends[0].Links()) != 1 || sends[0].Links()[0].SpanContext.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("send spans %v: want one linking the message's own context", sends)
	}
}

func TestSendSpanRecordsFailuresAndBoundsLinks(t *testing.T) {
	ctx := context.Background()
	tel := newTelemetry(t)
	inner := &spanRelay{}
	ob, db := tracedInstance(t, tel, inner, nil, []outboxerotel.Option{outboxerotel.WithMaxLinks(2)})
	for i := range 5 {
		if _, err := ob.Publish(ctx, db.DB, event{Box: "orders", Seq: i}); err != nil {
			t.Fatal(err)
		}
	}
	inner.err = errors.New("broker down")
	if res, err := ob.Drain(ctx, "orders"); err != nil || res.Failed != 5 {
		t.Fatalf("Drain = %+v, %v; want 5 failed", res, err)
	}
	// The failed batch is narrowed down to one message at a time (9 sends for 5
	// messages); the first send, of the whole batch, ends first.
	sends := spansNamed(tel, "send orders")
	if len(sends) != 9 {
		t.Fatalf("%d send spans, want 9", len(sends))
	}
	s := sends[0]
	if len(s.Links()) != 2 || spanAttr(s, outboxerotel.AttrLinksDropped).AsInt64() != 3 {
		t.Errorf("send span has %d links and %d dropped, want 2 and 3", len(s.Links()), spanAttr(s, outboxerotel.AttrLinksDropped).AsInt64())
	}
	if s.Status().Code != codes.Error || s.Status().Description != "broker down" || spanAttr(s, outboxerotel.AttrErrorType).AsString() != "_OTHER" {
		t.Errorf("send span status %+v, error.type %q", s.Status(), spanAttr(s, outboxerotel.AttrErrorType).AsString())
	}
	if len(s.Events()) != 1 || s.Events()[0].Name != "exception" {
		t.Errorf("send span events %v, want the recorded error", s.Events())
	}
}

func TestSendSpanOfAPartialFailure(t *testing.T) {
	ctx := context.Background()
	tel := newTelemetry(t)
	var mu sync.Mutex
	calls := 0
	inner := core.RelayFunc(func(_ context.Context, batch []core.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		if calls++; calls > 1 {
			return nil
		}
		return &core.PartialFailure{Failed: map[int64]error{batch[1].ID: errors.New("refused")}}
	})
	ob, db := tracedInstance(t, tel, inner, nil, nil)
	for i := range 3 {
		if _, err := ob.Publish(ctx, db.DB, event{Box: "orders", Seq: i}); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := ob.Drain(ctx, "orders"); err != nil || res.Delivered != 2 || res.Failed != 1 {
		t.Fatalf("Drain = %+v, %v; want 2 delivered, 1 failed", res, err)
	}
	sends := spansNamed(tel, "send orders")
	if len(sends) != 1 {
		t.Fatalf("%d send spans, want 1", len(sends))
	}
	s := sends[0]
	if s.Status().Code != codes.Error || s.Status().Description != "1 of 3 messages not delivered" ||
		spanAttr(s, outboxerotel.AttrFailed).AsInt64() != 1 || spanAttr(s, outboxerotel.AttrErrorType).AsString() != "partial" {
		t.Errorf("send span status %+v, failed %d", s.Status(), spanAttr(s, outboxerotel.AttrFailed).AsInt64())
	}
}

// txRelay is a core.TxRelay with a lifecycle.
type txRelay struct {
	spanRelay
	viaTx          int
	started, close int
}

func (r *txRelay) DeliverTx(ctx context.Context, _ *sql.Tx, batch []core.Envelope) error {
	r.viaTx++
	return r.Deliver(ctx, batch)
}
func (r *txRelay) Start(context.Context) error { r.started++; return nil }
func (r *txRelay) Close() error                { r.close++; return nil }

func TestRelayKeepsTheWrappedRelaysInterfaces(t *testing.T) {
	tel := newTelemetry(t)
	plain, err := outboxerotel.Relay(&spanRelay{}, outboxerotel.WithTracerProvider(tel.tracer))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := plain.(core.TxRelay); ok {
		t.Error("the wrapper of a plain relay is a TxRelay: the engine would call DeliverTx")
	}
	inner := &txRelay{}
	wrapped, err := outboxerotel.Relay(inner, outboxerotel.WithTracerProvider(tel.tracer))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := wrapped.(core.TxRelay); !ok {
		t.Fatal("the wrapper of a TxRelay is not a TxRelay")
	}
	if u, ok := wrapped.(interface{ Unwrap() core.Relay }); !ok || u.Unwrap() != inner {
		t.Error("the wrapper does not unwrap to the relay it wraps")
	}

	// Through the engine: started, delivered in the transaction with a send span, closed.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := dbtest.SQLite(t)
	ob, err := core.New(core.Config{DB: db.DB, Logger: quiet, Hooks: tel.hooks(t),
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: wrapped, PollInterval: 5e6}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ob.Run(ctx) }()
	if _, err := ob.Publish(ctx, db.DB, event{Box: "orders", Seq: 1}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		inner.mu.Lock()
		n := len(inner.envs)
		inner.mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, bounded by the deadline
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if inner.viaTx != 1 || inner.started != 1 || inner.close != 1 {
		t.Errorf("DeliverTx called %d times, Start %d, Close %d; want 1 each", inner.viaTx, inner.started, inner.close)
	}
	sends := spansNamed(tel, "send orders")
	creates := spansNamed(tel, "create orders")
	if len(sends) != 1 || len(creates) != 1 || len(sends[0].Links()) != 1 || !sends[0].Links()[0].SpanContext.Equal(creates[0].SpanContext().WithRemote(true)) {
		t.Fatalf("send spans %d, create spans %d: want one send linking the one create", len(sends), len(creates))
	}
	if inner.spans[0].SpanID() != sends[0].SpanContext().SpanID() {
		t.Error("DeliverTx's context does not carry the send span")
	}
}

func TestTracingCanBeTurnedOff(t *testing.T) {
	ctx := context.Background()
	tel := newTelemetry(t)
	inner := &spanRelay{}
	ob, db := tracedInstance(t, tel, inner, []outboxerotel.Option{outboxerotel.WithoutPublishSpans()}, nil)
	env, err := ob.Publish(ctx, db.DB, event{Box: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	if len(env.Headers) != 0 || len(spansNamed(tel, "create orders")) != 0 {
		t.Errorf("WithoutPublishSpans: headers %v, %d create spans", env.Headers, len(spansNamed(tel, "create orders")))
	}
	if _, err := ob.Drain(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if s := spansNamed(tel, "send orders"); len(s) != 1 || len(s[0].Links()) != 0 {
		t.Errorf("send spans %v: want one without links", s)
	}

	if h := tel.hooks(t, outboxerotel.WithoutSpans()); h.OnPublishContext != nil {
		t.Error("WithoutSpans leaves a publish hook")
	}
	r, err := outboxerotel.Relay(inner, outboxerotel.WithoutSpans())
	if err != nil || r != core.Relay(inner) {
		t.Errorf("Relay with WithoutSpans = %v, %v; want the relay itself", r, err)
	}
}

func TestTraceOptionsAreValidated(t *testing.T) {
	for name, opt := range map[string]outboxerotel.Option{
		"WithPropagator": outboxerotel.WithPropagator(nil),
		"WithMaxLinks":   outboxerotel.WithMaxLinks(-1),
	} {
		if _, err := outboxerotel.Hooks(opt); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Hooks(%s): %v", name, err)
		}
		if _, err := outboxerotel.Relay(&spanRelay{}, opt); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Relay(%s): %v", name, err)
		}
	}
	if _, err := outboxerotel.Relay(nil); err == nil {
		t.Error("Relay(nil) succeeded")
	}
}

// TestOtherPropagator stores the context with another propagator (here W3C baggage and
// trace context together) and reads it back at delivery.
func TestOtherPropagator(t *testing.T) {
	ctx := context.Background()
	tel := newTelemetry(t)
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	with := []outboxerotel.Option{outboxerotel.WithPropagator(prop)}
	ob, db := tracedInstance(t, tel, &spanRelay{}, with, with)
	for i := range 2 {
		if _, err := ob.Publish(ctx, db.DB, event{Box: "orders", Seq: i}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ob.Drain(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	creates, sends := spansNamed(tel, "create orders"), spansNamed(tel, "send orders")
	if len(creates) != 2 || len(sends) != 1 || len(sends[0].Links()) != 2 {
		t.Fatalf("%d create spans, send spans %v: want 2 and one send with 2 links", len(creates), sends)
	}
}

func TestCombineMergesPublishContextHooks(t *testing.T) {
	var order []string
	hook := func(name string, h map[string]string) core.Hooks {
		return core.Hooks{OnPublishContext: func(context.Context, core.PublishEvent) (map[string]string, func([]core.Envelope, error)) {
			order = append(order, name)
			return h, func([]core.Envelope, error) { order = append(order, "done "+name) }
		}}
	}
	h := outboxerotel.Combine(hook("a", map[string]string{"x": "a", "y": "a"}), core.Hooks{}, hook("b", map[string]string{"y": "b"}))
	headers, done := h.OnPublishContext(context.Background(), core.PublishEvent{})
	done(nil, nil)
	if !maps.Equal(headers, map[string]string{"x": "a", "y": "b"}) {
		t.Errorf("headers = %v, want the later hook's value for y", headers)
	}
	if got := strings.Join(order, ","); got != "a,b,done b,done a" {
		t.Errorf("calls %s, want a,b,done b,done a", got)
	}
}

func TestCombineThreadsBatchContexts(t *testing.T) {
	type key string
	hook := func(name string) core.Hooks {
		return core.Hooks{OnBatchContext: func(ctx context.Context, ev core.BatchEvent) context.Context {
			if name == "nil" {
				return nil
			}
			prev, _ := ctx.Value(key("path")).(string)
			return context.WithValue(ctx, key("path"), prev+name+":"+ev.Outbox+" ")
		}}
	}
	h := outboxerotel.Combine(hook("a"), core.Hooks{}, hook("nil"), hook("b"))
	ctx := h.OnBatchContext(context.Background(), core.BatchEvent{Outbox: "orders"})
	if got := ctx.Value(key("path")); got != "a:orders b:orders " {
		t.Errorf("context after the chain carries %q, want each hook's in turn", got)
	}
	if outboxerotel.Combine(core.Hooks{}).OnBatchContext != nil {
		t.Error("OnBatchContext should stay nil when no hook sets it")
	}
}

// ExampleRelay traces a delivery: the send span links to the publish span whose context
// the message carries.
func ExampleRelay() {
	ctx := context.Background()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(ctx)

	dir, err := os.MkdirTemp("", "outboxerotel")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.ToSlash(filepath.Join(dir, "app.db"))+"?_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	hooks, err := outboxerotel.Hooks(outboxerotel.WithTracerProvider(tp))
	if err != nil {
		panic(err)
	}
	delivered := core.RelayFunc(func(ctx context.Context, batch []core.Envelope) error {
		// A sink copies the headers to the broker; a consumer extracts the context with
		// propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(headers)).
		fmt.Println("traceparent stored:", batch[0].Headers["traceparent"] != "")
		return nil
	})
	relay, err := outboxerotel.Relay(delivered, outboxerotel.WithTracerProvider(tp))
	if err != nil {
		panic(err)
	}
	ob, err := core.New(core.Config{DB: db, Manual: true, Hooks: hooks, Logger: slog.New(slog.DiscardHandler),
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: relay}}})
	if err != nil {
		panic(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		panic(err)
	}
	ctx, span := tp.Tracer("shop").Start(ctx, "place order")
	if _, err := ob.Publish(ctx, db, core.Raw{To: "orders", Type: "order.placed", Data: []byte(`{"id":42}`)}); err != nil {
		panic(err)
	}
	span.End()
	if _, err := ob.Drain(ctx, "orders"); err != nil {
		panic(err)
	}
	ended := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans.Ended() {
		ended[s.Name()] = s
	}
	create, send, batch := ended["create orders"], ended["send orders"], ended[outboxerotel.SpanBatch]
	fmt.Println("create orders: child of place order:", create.Parent().SpanID() == span.SpanContext().SpanID())
	fmt.Println("send orders: links to create orders:", len(send.Links()) == 1 && send.Links()[0].SpanContext.SpanID() == create.SpanContext().SpanID())
	fmt.Println("send orders: child of outboxer.batch:", send.Parent().SpanID() == batch.SpanContext().SpanID())
	// Output:
	// traceparent stored: true
	// create orders: child of place order: true
	// send orders: links to create orders: true
	// send orders: child of outboxer.batch: true
}

// TestSendSpanReadsW3CAsTheStandardPropagator: the send span links, for each header a
// message may carry, the context propagation.TraceContext reads from it, and nothing for
// the invalid ones.
func TestSendSpanReadsW3CAsTheStandardPropagator(t *testing.T) {
	ctx := context.Background()
	tel := newTelemetry(t)
	ob, db := tracedInstance(t, tel, &spanRelay{}, []outboxerotel.Option{outboxerotel.WithoutPublishSpans()}, nil)
	const tid, sid = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	headers := []map[string]string{
		{"traceparent": "00-" + tid + "-" + sid + "-01"},
		{"traceparent": "00-" + tid + "-" + sid + "-00"}, // not sampled
		{"traceparent": "00-" + tid + "-" + sid + "-03", "tracestate": "vendor=a,other=b"},
		{"traceparent": "00-" + tid + "-b7ad6b7169203332-01", "tracestate": "not a state"},
		{"traceparent": "01-" + tid + "-b7ad6b7169203333-01-future"}, // a later version
		{"traceparent": "00-" + tid + "-b7ad6b7169203334-01-extra"},  // version 0 has no more fields
		{"traceparent": "ff-" + tid + "-b7ad6b7169203335-01"},        // forbidden version
		{"traceparent": "00-00000000000000000000000000000000-" + sid + "-01"},
		{"traceparent": "00-" + strings.ToUpper(tid) + "-" + sid + "-01"},
		{"traceparent": "00-" + tid + "-" + sid + "-1"},
		{"traceparent": "00-" + tid + "-" + sid + "-09"}, // reserved flags in version 0
		{"traceparent": "garbage"},
	}
	var want []trace.SpanContext
	for _, h := range headers {
		if _, err := ob.Publish(ctx, db.DB, core.Raw{To: "orders", Type: "t", Data: []byte(`{}`), Header: h}); err != nil {
			t.Fatal(err)
		}
		if sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(h))); sc.IsValid() {
			want = append(want, sc)
		}
	}
	if len(want) != 5 {
		t.Fatalf("the standard propagator reads %d of the headers, the test expects 5", len(want))
	}
	if _, err := ob.Drain(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	sends := spansNamed(tel, "send orders")
	if len(sends) != 1 {
		t.Fatalf("%d send spans, want 1", len(sends))
	}
	got := linked(sends[0])
	if len(got) != len(want) {
		t.Fatalf("links %v, want %v", got, want)
	}
	for i := range want {
		if !got[i].Equal(want[i]) {
			t.Errorf("link %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
