// Package outboxerotel reports what an Outboxer instance does as OpenTelemetry metrics
// and spans. It turns the engine's hooks (core.Hooks) into instruments:
//
//	hooks, err := outboxerotel.Hooks() // the global meter and tracer providers
//	if err != nil { ... }
//	ob, err := core.New(core.Config{DB: db, Hooks: hooks, Outboxes: ...})
//
// To keep hooks of your own, chain them with Combine:
//
//	cfg.Hooks = outboxerotel.Combine(hooks, core.Hooks{OnDead: alertOnCall})
//
// # Metrics
//
// All counters count messages, with the attributes outboxer.name (the instance's
// Config.Name) and outboxer.outbox; those counted per batch also carry
// outboxer.partition and outboxer.relay (the relay's Go type):
//
//	outboxer.messages.published  written to an outbox; the transaction may still roll
//	                             back. A publish to several outboxes at once is counted
//	                             without outboxer.outbox.
//	outboxer.messages.delivered  confirmed by the relay and recorded (per batch)
//	outboxer.messages.failed     failed and waiting for a retry (per batch)
//	outboxer.messages.dead       failed for the last time (per batch)
//	outboxer.messages.pruned     delivered messages removed after their retention
//
// Two histograms describe each batch, with the per-batch attributes, and error.type
// ("lease_lost", "timeout", "canceled" or "_OTHER") when the batch could not be
// recorded (an exception: it will be delivered again):
//
//	outboxer.batch.duration  seconds from handing the batch to the relay to its commit
//	outboxer.batch.size      messages handed to the relay
//
// # Health gauges
//
// The counters say what happened; the health says where things stand. RegisterGauges
// observes an instance's core.Health, read from the database when the metrics are
// collected (at most once per MinRefresh, 10 s by default, however many readers or
// scrapes there are):
//
//	g, err := outboxerotel.RegisterGauges(ob) // the global meter provider
//	if err != nil { ... }
//	defer g.Close()
//
// Per outbox, with outboxer.name and outboxer.outbox:
//
//	outboxer.outbox.pending      {message}    the backlog (retrying and scheduled included)
//	outboxer.outbox.retrying     {message}    pending messages that failed at least once
//	outboxer.outbox.scheduled    {message}    pending messages whose delay is not over
//	outboxer.outbox.dead         {message}    dead messages awaiting RetryDead or Discard
//	outboxer.outbox.oldest_age   s            how long the oldest due message has waited: the lag
//	outboxer.outbox.paused                    1 when paused, else 0
//	outboxer.partitions.unowned  {partition}  partitions no node holds a live lease on
//	outboxer.partitions.owned    {partition}  partitions held, per owner (outboxer.owner)
//
// The counts are asynchronous up-down counters, as OpenTelemetry advises for counts that
// add up (Prometheus shows them as gauges); the age and the pause are asynchronous
// gauges. OpenTelemetry's messaging conventions name no metric for a backlog or its age,
// hence the outboxer namespace. The health is the same whichever node reads it: register
// the gauges on one node, or aggregate with max rather than sum.
//
// With the Prometheus exporter the names become outboxer_outbox_pending,
// outboxer_outbox_oldest_age_seconds, outboxer_outbox_dead, outboxer_partitions_unowned
// and so on; examples/prometheus has alert rules written against them.
//
// # Spans
//
// Each batch gets a span named outboxer.batch, from the batch's start to its stop or
// exception, with the per-batch attributes and the counts of the outcome
// (outboxer.batch.count, .fetched, .delivered, .failed, .dead). The status is Error
// when a message of the batch failed, and when the batch ended in an exception, whose
// error is recorded on the span. Failed messages appear as the span events
// outboxer.message.retry and outboxer.message.dead (ID, type, group key, attempt,
// error) while the outbox has a single batch in flight, which is always the case with
// one partition and in Drain; with several partitions delivering at once the engine's
// message events do not say which batch they belong to, and only the counts are kept.
//
// The batch span starts in the worker's context (core.Hooks.OnBatchContext), which
// carries no trace, so it is the root of a trace of its own; the relay delivers in its
// context, so the relay's spans are its children: the send span of a relay wrapped with
// Relay (below), and through it a broker client's. WithoutSpans records the metrics
// alone.
//
// # Tracing a message from publish to consumer
//
// Hooks also starts a span at every Publish and PublishAll call, through
// core.Hooks.OnPublishContext: a PRODUCER span named "create <outbox>" (semantic
// conventions for messaging: messaging.system "outboxer", messaging.operation.type
// "create", messaging.destination.name the outbox, messaging.message.id the stored ID
// of a single message, messaging.batch.message_count for several), a child of the span
// in the caller's context. Its context is stored in the messages' headers by the
// propagator, W3C trace context by default (traceparent, and tracestate when the trace
// has one; WithPropagator changes it). The messages of one PublishAll call share one
// span. A header the message sets itself (Headerer, core.WithHeaders) wins over the
// stored context. A failed publish ends the span with its error; a transaction rolled
// back later leaves a span for messages that never existed. WithoutPublishSpans turns
// this off.
//
// Relay wraps a relay so that each delivery runs in a span "send <outbox>" (kind CLIENT,
// since the create spans are the messages' creation context; messaging.operation.type
// "send") that links to the create span of every message of the batch: a context
// shared by consecutive messages is linked once, and at most WithMaxLinks contexts
// (default 128) are linked, the rest counted in outboxer.batch.links_dropped. The
// wrapped relay gets the send span in its context, so a broker client's own spans are
// its children. The span ends with the delivery's outcome: an error, or a
// *core.PartialFailure with the count of failed messages.
//
//	hooks, _ := outboxerotel.Hooks()
//	relay, _ := outboxerotel.Relay(kafkaRelay)
//	ob, err := core.New(core.Config{DB: db, Hooks: hooks,
//		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: relay}}})
//
// The sinks copy the headers to the broker (Kafka record headers, SQS message
// attributes, Watermill metadata, River job args); each sink's documentation shows the
// one call with which a consumer extracts the context. A consumer span started from it
// is a child of the create span, in the publisher's trace:
//
//	ctx := propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(headers))
//	ctx, span := tracer.Start(ctx, "process orders", trace.WithSpanKind(trace.SpanKindConsumer))
//
// The publisher and the relay must use the same propagator. The default is the W3C trace
// context rather than the global propagator, which stores nothing until one is set;
// pass otel.GetTextMapPropagator() to follow the global one.
//
// Package oteltest checks this path in a test of a sink of your own: CheckTrace takes the
// ended spans and, per message, the publishing and the consuming span, and reports any
// break in the chain (the Kafka and Watermill sinks' tests use it).
//
// The hooks run on the engine's goroutines and only record in memory; they are safe for
// concurrent use, and one value may serve several instances.
package outboxerotel
