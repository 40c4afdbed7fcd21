package outboxerotel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxer-go/outboxer/core"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/outboxer-go/outboxer/otel"

// The names of the instruments.
const (
	MetricPublished     = "outboxer.messages.published" // counter, {message}
	MetricDelivered     = "outboxer.messages.delivered" // counter, {message}
	MetricFailed        = "outboxer.messages.failed"    // counter, {message}: failed, will be retried
	MetricDead          = "outboxer.messages.dead"      // counter, {message}
	MetricPruned        = "outboxer.messages.pruned"    // counter, {message}
	MetricBatchDuration = "outboxer.batch.duration"     // histogram, seconds
	MetricBatchSize     = "outboxer.batch.size"         // histogram, {message} handed to the relay
)

// SpanBatch is the name of the span covering one batch.
const SpanBatch = "outboxer.batch"

// The names of the span events for one message of a batch.
const (
	EventRetry = "outboxer.message.retry"
	EventDead  = "outboxer.message.dead"
)

// The attribute keys.
const (
	AttrName      = attribute.Key("outboxer.name")      // the instance (Config.Name)
	AttrOutbox    = attribute.Key("outboxer.outbox")    // the outbox
	AttrPartition = attribute.Key("outboxer.partition") // the partition of a batch
	AttrRelay     = attribute.Key("outboxer.relay")     // the relay's Go type
	// AttrErrorType classifies a batch that ended in an exception: "lease_lost",
	// "timeout", "canceled" or "_OTHER". Absent when the batch was confirmed.
	AttrErrorType = attribute.Key("error.type")

	// Span attributes only.
	AttrCount     = attribute.Key("outboxer.batch.count")     // messages handed to the relay
	AttrFetched   = attribute.Key("outboxer.batch.fetched")   // messages read
	AttrDelivered = attribute.Key("outboxer.batch.delivered") // confirmed
	AttrFailed    = attribute.Key("outboxer.batch.failed")    // failed, will be retried
	AttrDead      = attribute.Key("outboxer.batch.dead")      // failed for the last time
	AttrMessageID = attribute.Key("outboxer.message.id")
	AttrType      = attribute.Key("outboxer.message.type")
	AttrGroupKey  = attribute.Key("outboxer.message.group_key")
	AttrAttempt   = attribute.Key("outboxer.message.attempt")
	AttrError     = attribute.Key("exception.message")
)

// Option configures Hooks.
type Option func(*config) error

type config struct {
	meters  metric.MeterProvider
	tracers trace.TracerProvider
	spans   bool

	// Tracing of publish and delivery (trace.go).
	propagator propagation.TextMapPropagator
	noPublish  bool
	maxLinks   int
}

// configure applies opts over the defaults, with the global providers for those unset.
func configure(opts []Option) (config, error) {
	cfg := config{spans: true, maxLinks: DefaultMaxLinks}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&cfg); err != nil {
			return config{}, fmt.Errorf("outboxerotel: %w", err)
		}
	}
	if cfg.meters == nil {
		cfg.meters = otel.GetMeterProvider()
	}
	if cfg.tracers == nil {
		cfg.tracers = otel.GetTracerProvider()
	}
	return cfg, nil
}

// WithMeterProvider records the metrics through mp instead of the global provider.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) error {
		if mp == nil {
			return errors.New("WithMeterProvider: the provider is nil")
		}
		c.meters = mp
		return nil
	}
}

// WithTracerProvider starts the batch spans through tp instead of the global provider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) error {
		if tp == nil {
			return errors.New("WithTracerProvider: the provider is nil")
		}
		c.tracers = tp
		return nil
	}
}

// WithoutSpans records metrics only: no span per batch, no publish span and no trace
// context in the messages (Relay then returns the relay it is given, unwrapped).
func WithoutSpans() Option {
	return func(c *config) error {
		c.spans = false
		return nil
	}
}

// Hooks returns engine hooks that record OpenTelemetry metrics and, unless WithoutSpans
// is given, a span per batch and a publish span per Publish or PublishAll call, whose
// trace context goes into the messages' headers (core.Hooks.OnPublishContext; see the
// package documentation, and WithoutPublishSpans). Without options the global meter and tracer providers are
// used (as they are when Hooks is called). Put the result in core.Config.Hooks, or chain
// it with hooks of your own through Combine.
//
// One value of the result may serve several instances: the instance's Config.Name is
// the outboxer.name attribute.
func Hooks(opts ...Option) (core.Hooks, error) {
	cfg, err := configure(opts)
	if err != nil {
		return core.Hooks{}, err
	}
	b := &bridge{open: map[batchKey][]trace.Span{}, inFlight: map[outboxKey]int{}}
	if err := b.instruments(cfg.meters.Meter(ScopeName)); err != nil {
		return core.Hooks{}, fmt.Errorf("outboxerotel: %w", err)
	}
	h := core.Hooks{
		OnPublish:        b.publish,
		OnBatchStop:      b.batchStop,
		OnBatchException: b.batchException,
		OnRetry:          b.onRetry,
		OnDead:           b.onDead,
		OnPrune:          b.prune,
	}
	if cfg.spans {
		b.tracer = cfg.tracers.Tracer(ScopeName)
		h.OnBatchContext = b.batchContext
		if !cfg.noPublish {
			p := &publisher{tracer: b.tracer, prop: cfg.propagatorOf()}
			h.OnPublishContext = p.start
		}
	}
	return h, nil
}

type batchKey struct {
	name, outbox string
	partition    int
}

type outboxKey struct{ name, outbox string }

type bridge struct {
	published, delivered, failed, dead, pruned metric.Int64Counter
	duration                                   metric.Float64Histogram
	size                                       metric.Int64Histogram

	tracer trace.Tracer // nil: no spans

	mu sync.Mutex
	// open holds the spans of the batches in flight, oldest first: at most one per key,
	// unless two instances share a name and a table.
	open map[batchKey][]trace.Span
	// inFlight counts the open spans per outbox, to find the span of a message event.
	inFlight map[outboxKey]int
}

func (b *bridge) instruments(m metric.Meter) error {
	var err error
	counter := func(name, desc string) metric.Int64Counter {
		c, e := m.Int64Counter(name, metric.WithUnit("{message}"), metric.WithDescription(desc))
		err = errors.Join(err, e)
		return c
	}
	b.published = counter(MetricPublished, "Messages written to an outbox (their transaction may still roll back).")
	b.delivered = counter(MetricDelivered, "Messages a relay delivered and the engine confirmed.")
	b.failed = counter(MetricFailed, "Failed deliveries that will be retried after their backoff.")
	b.dead = counter(MetricDead, "Messages that failed for the last time and are now dead.")
	b.pruned = counter(MetricPruned, "Delivered messages removed after their retention.")
	var e error
	b.duration, e = m.Float64Histogram(MetricBatchDuration, metric.WithUnit("s"),
		metric.WithDescription("Time to deliver a batch through its relay and confirm it."),
		metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
	err = errors.Join(err, e)
	b.size, e = m.Int64Histogram(MetricBatchSize, metric.WithUnit("{message}"),
		metric.WithDescription("Messages handed to a relay in one batch."),
		metric.WithExplicitBucketBoundaries(1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000))
	return errors.Join(err, e)
}

func batchAttrs(ev core.BatchEvent) []attribute.KeyValue {
	return []attribute.KeyValue{
		AttrName.String(ev.Name),
		AttrOutbox.String(ev.Outbox),
		AttrPartition.Int(ev.Partition),
		AttrRelay.String(ev.Relay),
	}
}

func (b *bridge) publish(ev core.PublishEvent) {
	attrs := []attribute.KeyValue{AttrName.String(ev.Name)}
	// The event counts the messages of all its outboxes together: the outbox is named
	// only when there is one.
	if len(ev.Outboxes) == 1 {
		attrs = append(attrs, AttrOutbox.String(ev.Outboxes[0]))
	}
	b.published.Add(context.Background(), int64(ev.Count), metric.WithAttributes(attrs...))
}

func (b *bridge) prune(ev core.PruneEvent) {
	b.pruned.Add(context.Background(), int64(ev.Count),
		metric.WithAttributes(AttrName.String(ev.Name), AttrOutbox.String(ev.Outbox)))
}

// batchContext starts the batch's span, in the worker's context; the relay delivers in
// the context returned, so the relay's spans (Relay's send span) are its children.
func (b *bridge) batchContext(ctx context.Context, ev core.BatchEvent) context.Context {
	ctx, span := b.tracer.Start(ctx, SpanBatch,
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(append(batchAttrs(ev), AttrCount.Int(ev.Count), AttrFetched.Int(ev.Fetched))...))
	k := batchKey{ev.Name, ev.Outbox, ev.Partition}
	b.mu.Lock()
	b.open[k] = append(b.open[k], span)
	b.inFlight[outboxKey{ev.Name, ev.Outbox}]++
	b.mu.Unlock()
	return ctx
}

// end removes and returns the oldest open span of the batch's key, or nil.
func (b *bridge) end(ev core.BatchEvent) trace.Span {
	if b.tracer == nil {
		return nil
	}
	k := batchKey{ev.Name, ev.Outbox, ev.Partition}
	b.mu.Lock()
	defer b.mu.Unlock()
	spans := b.open[k]
	if len(spans) == 0 {
		return nil
	}
	span := spans[0]
	if len(spans) == 1 {
		delete(b.open, k)
	} else {
		b.open[k] = spans[1:]
	}
	ok := outboxKey{ev.Name, ev.Outbox}
	if b.inFlight[ok]--; b.inFlight[ok] <= 0 {
		delete(b.inFlight, ok)
	}
	return span
}

func (b *bridge) batchStop(ev core.BatchEvent) {
	ctx := context.Background()
	attrs := metric.WithAttributes(batchAttrs(ev)...)
	b.delivered.Add(ctx, int64(ev.Delivered), attrs)
	b.failed.Add(ctx, int64(ev.Failed), attrs)
	b.dead.Add(ctx, int64(ev.Dead), attrs)
	b.duration.Record(ctx, ev.Duration.Seconds(), attrs)
	b.size.Record(ctx, int64(ev.Count), attrs)
	if span := b.end(ev); span != nil {
		span.SetAttributes(AttrDelivered.Int(ev.Delivered), AttrFailed.Int(ev.Failed), AttrDead.Int(ev.Dead))
		if ev.Failed > 0 || ev.Dead > 0 {
			span.SetStatus(codes.Error, fmt.Sprintf("%d of %d messages failed (%d will be retried, %d dead)",
				ev.Failed+ev.Dead, ev.Count, ev.Failed, ev.Dead))
		}
		span.End()
	}
}

func (b *bridge) batchException(ev core.BatchEvent) {
	ctx := context.Background()
	kind := errorType(ev.Err)
	attrs := metric.WithAttributes(append(batchAttrs(ev), AttrErrorType.String(kind))...)
	b.duration.Record(ctx, ev.Duration.Seconds(), attrs)
	b.size.Record(ctx, int64(ev.Count), attrs)
	if span := b.end(ev); span != nil {
		span.SetAttributes(AttrErrorType.String(kind))
		if ev.Err != nil {
			span.RecordError(ev.Err)
			span.SetStatus(codes.Error, ev.Err.Error())
		} else {
			span.SetStatus(codes.Error, "batch failed")
		}
		span.End()
	}
}

// errorType classifies the error of a batch exception with few, stable values.
func errorType(err error) string {
	switch {
	case errors.Is(err, core.ErrLeaseLost):
		return "lease_lost"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "_OTHER"
}

func (b *bridge) onRetry(ev core.MessageEvent) { b.messageEvent(EventRetry, ev) }
func (b *bridge) onDead(ev core.MessageEvent)  { b.messageEvent(EventDead, ev) }

// messageEvent adds a retry or dead event to the span of the message's batch. The engine
// raises it between the batch's start and stop, but names no partition: the span is known
// only while the outbox has one batch in flight (always with one partition, and in Drain).
// Otherwise the event is left out; the counters still count it, from the batch's stop.
func (b *bridge) messageEvent(name string, ev core.MessageEvent) {
	if b.tracer == nil {
		return
	}
	b.mu.Lock()
	var span trace.Span
	if b.inFlight[outboxKey{ev.Name, ev.Outbox}] == 1 {
		for k, spans := range b.open {
			if k.name == ev.Name && k.outbox == ev.Outbox {
				span = spans[0]
				break
			}
		}
	}
	b.mu.Unlock()
	if span == nil {
		return
	}
	attrs := []attribute.KeyValue{
		AttrMessageID.Int64(ev.ID),
		AttrType.String(ev.Type),
		AttrGroupKey.String(ev.GroupKey),
		AttrAttempt.Int(ev.Attempt),
	}
	if ev.Err != nil {
		attrs = append(attrs, AttrError.String(ev.Err.Error()))
	}
	span.AddEvent(name, trace.WithAttributes(attrs...), trace.WithTimestamp(time.Now()))
}
