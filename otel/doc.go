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
// The spans are roots: the engine's hooks carry no context, so a relay's own spans are
// not their children. WithoutSpans records the metrics alone.
//
// The hooks run on the engine's goroutines and only record in memory; they are safe for
// concurrent use, and one value may serve several instances.
package outboxerotel
