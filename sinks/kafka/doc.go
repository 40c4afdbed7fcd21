// Package kafka is an Outboxer relay that writes messages to Apache Kafka with franz-go.
//
// Each message becomes one record:
//
//   - the record key is the message's group key (none for unordered messages), so a
//     group's messages land in one partition and keep their order there;
//   - the value is the payload, as stored;
//   - the headers are the message's own headers (sorted by name), then HeaderID
//     ("outboxer-id", the envelope ID in decimal), HeaderType ("outboxer-type"),
//     HeaderOutbox ("outboxer-outbox") and HeaderKey ("outboxer-key", the message key
//     of core.MessageKey from Config.Source, Config.Table and the ID). A message header
//     with one of these names is dropped. Delivery is at least once: consumers
//     deduplicate on outboxer-key, with the inbox package for one;
//   - the topic is Config.Topic, or Config.TopicFunc's choice per message.
//
// The relay builds its client with the idempotent producer and acks from every in-sync
// replica (Acks, Compression and Linger are configurable and validated by New), or uses
// a client you built (Config.Client).
//
// # Results
//
// Deliver waits for every record's result. A record Kafka refused is named in a
// *core.PartialFailure, and so is every later message of its group in the batch: the
// relay does not send them, so a group never overtakes its own failed message. Errors
// retrying cannot fix (a record larger than MaxRecordBytes, which is refused before
// sending; MESSAGE_TOO_LARGE, INVALID_RECORD or an invalid topic from Kafka; no topic
// from TopicFunc) are wrapped with core.Permanent, so the message goes dead at once
// instead of holding back its group forever.
//
// Kafka's own transient errors (leader changes, replicas catching up) are retried inside
// the client, in order, until the delivery's context ends.
//
// # Trace context
//
// The message headers carry the publisher's trace context when publishing is traced
// (package outboxerotel stores W3C traceparent and tracestate), so they arrive as record
// headers. A consumer continues the trace from them:
//
//	h := map[string]string{}
//	for _, rh := range rec.Headers { h[rh.Key] = string(rh.Value) }
//	ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(h))
//
// # CloudEvents
//
// With Config.CloudEvents every record is a CloudEvent 1.0, which any CloudEvents SDK's
// Kafka binding reads. In the binary content mode (the default) the value is the payload
// and the attributes are headers: ce_specversion, ce_id (the message key, so the id is
// the same on every delivery), ce_source (CloudEvents.Source), ce_type (the message
// type), ce_subject and ce_partitionkey (the group key, which stays the record key),
// ce_time (when the message was created) and content-type (CloudEvents.DataContentType).
// The message's headers become extensions, ce_<name>, so the trace context arrives as
// ce_traceparent and ce_tracestate (the distributed tracing extension). With
// CloudEvents.Structured the value is the JSON event (content-type
// application/cloudevents+json). The relay's own outboxer- headers stay in both modes.
// A message whose header names are not extension names (lowercase a-z and 0-9, at most
// 20 characters) or whose values CloudEvents forbids (control characters, invalid
// UTF-8) goes dead at once, with ErrNotCloudEvent.
//
// # Consuming with the inbox
//
// Every record carries HeaderKey (outboxer-key), the key a consumer deduplicates on.
// NewConsumer wraps a franz-go consumer-group client (with kgo.DisableAutoCommit) and
// an inbox.Inbox: each record's handler runs in a database transaction that first
// claims the key, so a record delivered again (by the relay after a crash, or by Kafka
// to a consumer restarted before committing its offsets) does not run the handler
// twice; offsets are committed only after the transactions commit.
//
// A record without HeaderKey that is a CloudEvent (another producer's, in either content
// mode) is keyed on its CloudEvents id (see MessageOf). Any other record without
// HeaderKey (another producer's, on a topic the relay shares) cannot be deduplicated and does not reach the handler: ConsumerConfig.OnForeign, an
// inbox.ForeignPolicy, decides. By default (inbox.SkipForeign) the consumer logs a
// warning and commits past the record, so the partition goes on and a restarted
// consumer does not meet it again; inbox.StopOnForeign makes Run return an error
// matching inbox.ErrNoKey without committing it; a function of yours can dead-letter
// it first (see ExampleConsumerConfig_onForeign).
package kafka
