package outboxerotel

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxer-go/outboxer/core"
)

// MessagingSystem is the messaging.system of the publish and send spans.
const MessagingSystem = "outboxer"

// DefaultMaxLinks is the default of WithMaxLinks: the OpenTelemetry SDK's default limit
// of links per span.
const DefaultMaxLinks = 128

// The messaging attributes of the publish and send spans (OpenTelemetry semantic
// conventions for messaging).
const (
	AttrMessagingSystem        = attribute.Key("messaging.system")
	AttrMessagingOperationType = attribute.Key("messaging.operation.type") // "create" or "send"
	AttrMessagingOperationName = attribute.Key("messaging.operation.name") // "publish" or "deliver"
	AttrMessagingDestination   = attribute.Key("messaging.destination.name")
	AttrMessagingBatchCount    = attribute.Key("messaging.batch.message_count")
	AttrMessagingMessageID     = attribute.Key("messaging.message.id")
	// AttrLinksDropped counts the messages of a batch whose context was not linked
	// because the span had WithMaxLinks links already.
	AttrLinksDropped = attribute.Key("outboxer.batch.links_dropped")
)

// WithPropagator stores and reads the trace context in message headers with p instead of
// propagation.TraceContext{} (the W3C traceparent and tracestate headers). Publishers and
// relays must use the same propagator; to follow the global one, pass
// otel.GetTextMapPropagator() (it stores nothing until a propagator is set globally).
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) error {
		if p == nil {
			return errors.New("WithPropagator: the propagator is nil")
		}
		c.propagator = p
		return nil
	}
}

// WithoutPublishSpans leaves publishing alone: Hooks then starts no span at publish and
// stores no trace context in the messages, so the relay's send spans have nothing to
// link to.
func WithoutPublishSpans() Option {
	return func(c *config) error {
		c.noPublish = true
		return nil
	}
}

// WithMaxLinks bounds the links of a send span (Relay): the first n distinct publish
// contexts of a batch are linked, the others counted in outboxer.batch.links_dropped.
// Default DefaultMaxLinks; 0 links nothing.
func WithMaxLinks(n int) Option {
	return func(c *config) error {
		if n < 0 {
			return fmt.Errorf("WithMaxLinks: %d is negative", n)
		}
		c.maxLinks = n
		return nil
	}
}

// propagatorOf returns the configured propagator or the W3C trace context.
func (c *config) propagatorOf() propagation.TextMapPropagator {
	if c.propagator != nil {
		return c.propagator
	}
	return propagation.TraceContext{}
}

// publisher starts the publish spans (Hooks.OnPublishContext).
type publisher struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

var (
	createAttrs = []attribute.KeyValue{
		AttrMessagingSystem.String(MessagingSystem),
		AttrMessagingOperationType.String("create"),
		AttrMessagingOperationName.String("publish"),
	}
	sendAttrs = []attribute.KeyValue{
		AttrMessagingSystem.String(MessagingSystem),
		AttrMessagingOperationType.String("send"),
		AttrMessagingOperationName.String("deliver"),
	}
)

// start is Hooks.OnPublishContext: a PRODUCER span "create <outbox>", child of the
// caller's span, whose context goes into the messages' headers.
func (p *publisher) start(ctx context.Context, ev core.PublishEvent) (map[string]string, func([]core.Envelope, error)) {
	name := "create"
	attrs := make([]attribute.KeyValue, 0, len(createAttrs)+3)
	attrs = append(attrs, createAttrs...)
	attrs = append(attrs, AttrName.String(ev.Name))
	if len(ev.Outboxes) == 1 {
		name = "create " + ev.Outboxes[0]
		attrs = append(attrs, AttrMessagingDestination.String(ev.Outboxes[0]))
	}
	if ev.Count > 1 {
		attrs = append(attrs, AttrMessagingBatchCount.Int(ev.Count))
	}
	ctx, span := p.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	if !span.SpanContext().IsValid() {
		// A no-op tracer and no span in ctx: there is no context to store.
		span.End()
		return nil, nil
	}
	headers := make(map[string]string, 2)
	p.prop.Inject(ctx, propagation.MapCarrier(headers))
	return headers, func(envs []core.Envelope, err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else if len(envs) == 1 {
			span.SetAttributes(AttrMessagingMessageID.String(strconv.FormatInt(envs[0].ID, 10)))
		}
		span.End()
	}
}

// Relay wraps inner so that every delivery runs in a span "send <outbox>" (kind CLIENT,
// messaging.operation.type "send") that links to the publish span of each message of the
// batch, read from the message's headers with the propagator (see WithPropagator). The
// span's context is the context inner's Deliver receives, so inner's own spans (a
// broker client's) are its children. The messages and their headers are passed on
// untouched: a sink copies them to the broker, and a consumer that extracts the context
// continues the publisher's trace, as a child of the publish span.
//
// The wrapper is a core.TxRelay exactly when inner is one, forwards Start and Close to
// inner when inner has them (core.Starter, core.Closer), and unwraps (Unwrap) so the
// engine's telemetry names inner's type. Wrap a relay once and give the wrapper to every
// outbox that shares it: Run starts and closes each distinct relay once.
//
// Relay uses WithTracerProvider, WithPropagator and WithMaxLinks; with WithoutSpans it
// returns inner as it is; other options are ignored.
func Relay(inner core.Relay, opts ...Option) (core.Relay, error) {
	if inner == nil {
		return nil, errors.New("outboxerotel: Relay: the relay is nil")
	}
	cfg, err := configure(opts)
	if err != nil {
		return nil, err
	}
	if !cfg.spans {
		return inner, nil
	}
	r := &tracedRelay{
		inner:    inner,
		tracer:   cfg.tracers.Tracer(ScopeName),
		prop:     cfg.propagatorOf(),
		maxLinks: cfg.maxLinks,
	}
	if _, ok := r.prop.(propagation.TraceContext); ok {
		r.w3c = true
	}
	if txr, ok := inner.(core.TxRelay); ok {
		return &tracedTxRelay{tracedRelay: r, tx: txr}, nil
	}
	return r, nil
}

type tracedRelay struct {
	inner    core.Relay
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	w3c      bool // prop is the W3C trace context: equal traceparents are one context
	maxLinks int

	names sync.Map // outbox → span name "send <outbox>"
}

type tracedTxRelay struct {
	*tracedRelay
	tx core.TxRelay
}

var (
	_ interface {
		core.Relay
		core.Starter
		core.Closer
	} = (*tracedRelay)(nil)
	_ core.TxRelay = (*tracedTxRelay)(nil)
)

// Unwrap returns the wrapped relay.
func (r *tracedRelay) Unwrap() core.Relay { return r.inner }

// Start starts the wrapped relay if it is a core.Starter.
func (r *tracedRelay) Start(ctx context.Context) error {
	if s, ok := r.inner.(core.Starter); ok {
		return s.Start(ctx)
	}
	return nil
}

// Close closes the wrapped relay if it is a core.Closer.
func (r *tracedRelay) Close() error {
	if c, ok := r.inner.(core.Closer); ok {
		return c.Close()
	}
	return nil
}

// Deliver delivers batch through the wrapped relay inside a send span.
func (r *tracedRelay) Deliver(ctx context.Context, batch []core.Envelope) (err error) {
	if len(batch) == 0 {
		return r.inner.Deliver(ctx, batch)
	}
	ctx, span := r.start(ctx, batch)
	defer func() { r.end(span, len(batch), err, recover()) }()
	return r.inner.Deliver(ctx, batch)
}

// DeliverTx delivers batch through the wrapped relay's DeliverTx inside a send span.
func (r *tracedTxRelay) DeliverTx(ctx context.Context, tx *sql.Tx, batch []core.Envelope) (err error) {
	if len(batch) == 0 {
		return r.tx.DeliverTx(ctx, tx, batch)
	}
	ctx, span := r.start(ctx, batch)
	defer func() { r.end(span, len(batch), err, recover()) }()
	return r.tx.DeliverTx(ctx, tx, batch)
}

func (r *tracedRelay) spanName(outbox string) string {
	if n, ok := r.names.Load(outbox); ok {
		return n.(string)
	}
	n := "send " + outbox
	r.names.Store(outbox, n)
	return n
}

// start starts the send span of a batch, then links it to each distinct publish context.
// The links are added to the started span rather than given to Start: samplers do not
// look at them, and the SDK would copy them once more.
func (r *tracedRelay) start(ctx context.Context, batch []core.Envelope) (context.Context, trace.Span) {
	outbox := batch[0].Outbox
	attrs := make([]attribute.KeyValue, 0, len(sendAttrs)+4)
	attrs = append(attrs, sendAttrs...)
	attrs = append(attrs,
		AttrMessagingDestination.String(outbox),
		AttrOutbox.String(outbox),
		AttrPartition.Int(batch[0].Partition),
		AttrMessagingBatchCount.Int(len(batch)),
	)
	ctx, span := r.tracer.Start(ctx, r.spanName(outbox), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	if !span.IsRecording() {
		return ctx, span
	}
	linked, dropped := 0, 0
	var last string // the last traceparent read (W3C only)
	var lastSC trace.SpanContext
	for i := range batch {
		h := batch[i].Headers
		if len(h) == 0 {
			continue
		}
		var sc trace.SpanContext
		if r.w3c {
			tp := h["traceparent"]
			if tp == "" || tp == last {
				continue
			}
			last = tp
			if linked >= r.maxLinks {
				// Another context, past the limit: counted without being read.
				dropped++
				continue
			}
			sc = parseW3C(tp, h["tracestate"])
		} else {
			sc = trace.SpanContextFromContext(r.prop.Extract(context.Background(), propagation.MapCarrier(h)))
		}
		if !sc.IsValid() || sc.Equal(lastSC) {
			continue
		}
		lastSC = sc
		if linked >= r.maxLinks {
			dropped++
			continue
		}
		span.AddLink(trace.Link{SpanContext: sc})
		linked++
	}
	if dropped > 0 {
		span.SetAttributes(AttrLinksDropped.Int(dropped))
	}
	return ctx, span
}

// end records the outcome of a delivery on its span and ends it; a panic goes on.
func (r *tracedRelay) end(span trace.Span, n int, err error, panicked any) {
	var pf *core.PartialFailure
	switch {
	case panicked != nil:
		span.SetStatus(codes.Error, fmt.Sprintf("relay panicked: %v", panicked))
		span.SetAttributes(AttrErrorType.String("_OTHER"))
	case err == nil:
	case errors.As(err, &pf):
		span.SetAttributes(AttrFailed.Int(len(pf.Failed)), AttrErrorType.String("partial"))
		span.SetStatus(codes.Error, fmt.Sprintf("%d of %d messages not delivered", len(pf.Failed), n))
	default:
		span.RecordError(err)
		span.SetAttributes(AttrErrorType.String(errorType(err)))
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	if panicked != nil {
		panic(panicked)
	}
}

// parseW3C reads a W3C traceparent (and tracestate) as propagation.TraceContext does,
// without the context it would allocate per message: "00-<trace ID>-<span ID>-<flags>",
// or a later version with more fields after these. An invalid one gives the zero
// SpanContext.
func parseW3C(traceparent, tracestate string) trace.SpanContext {
	const n = 55 // 2+1+32+1+16+1+2
	if len(traceparent) < n || traceparent[2] != '-' || traceparent[35] != '-' || traceparent[52] != '-' {
		return trace.SpanContext{}
	}
	var version, flags [1]byte
	var cfg trace.SpanContextConfig
	ok := unhex(version[:], traceparent[:2]) && unhex(cfg.TraceID[:], traceparent[3:35]) &&
		unhex(cfg.SpanID[:], traceparent[36:52]) && unhex(flags[:], traceparent[53:55])
	if !ok || version[0] == 0xff || (len(traceparent) > n && traceparent[n] != '-') ||
		(version[0] == 0 && (len(traceparent) != n || flags[0] > 3)) {
		return trace.SpanContext{}
	}
	cfg.TraceFlags = trace.TraceFlags(flags[0]) & (trace.FlagsSampled | trace.FlagsRandom)
	cfg.Remote = true
	if tracestate != "" {
		if ts, err := trace.ParseTraceState(tracestate); err == nil {
			cfg.TraceState = ts
		}
	}
	return trace.NewSpanContext(cfg)
}

// unhex decodes lowercase hex (as W3C requires) from s into dst, which is len(s)/2 long.
func unhex(dst []byte, s string) bool {
	bad := byte(0)
	for i := range dst {
		hi, lo := hexTable[s[2*i]], hexTable[s[2*i+1]]
		bad |= hi | lo
		dst[i] = hi<<4 | lo
	}
	return bad&0xf0 == 0
}

// hexTable maps '0'-'9' and 'a'-'f' to their values and every other byte to 0xff.
var hexTable = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for c := byte('0'); c <= '9'; c++ {
		t[c] = c - '0'
	}
	for c := byte('a'); c <= 'f'; c++ {
		t[c] = c - 'a' + 10
	}
	return t
}()
