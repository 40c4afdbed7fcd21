// Package watermillsink relays outbox messages to any Watermill publisher
// (message.Publisher): AMQP, NATS, Kafka, Redis Streams, SQL, Google Pub/Sub, or the
// in-process GoChannel.
//
// The import path ends in watermill; the package is named watermillsink so that it does
// not shadow Watermill's own package.
//
//	pub, _ := amqp.NewPublisher(amqp.NewDurableQueueConfig(uri), logger)
//	sink, err := watermillsink.New(pub, watermillsink.Options{Topic: "orders"})
//	// core.OutboxConfig{Relay: sink, ...}
//
// # The message
//
// Each envelope becomes one Watermill message:
//
//   - UUID: a name-based UUID derived from the outbox table and the envelope's ID
//     (MessageUUID). A message delivered twice (after a crash, or a retried batch) has
//     the same UUID both times, so a consumer can drop what it has already seen. Set
//     Options.Table when the outbox does not use the default table.
//   - Payload: the envelope's payload, byte for byte.
//   - Metadata: the envelope's headers, plus outboxer_id (the ID in decimal),
//     outboxer_outbox, outboxer_type and outboxer_group_key (only for grouped messages).
//     These four win over a header of the same name.
//
// The topic is Options.Topic, or Options.TopicFunc(envelope) to route per message.
//
// # Order and failures
//
// A Watermill publisher takes several messages and returns one error, so it cannot say
// which message failed. The sink therefore publishes one message per call by default,
// in batch order, and stops at the first failure. Deliver then returns a
// *core.PartialFailure naming the failed message, with the publisher's error, and every
// later message of the batch, with ErrEarlierFailed. ErrEarlierFailed matches
// core.ErrHeldBack: the engine keeps those messages pending without counting an attempt
// and hands them again, in order, in its next batch. Only the failed message is charged
// an attempt and waits for its backoff, holding back its group (everything, with
// core.OrderTotal); the other groups go on at the next batch. So the sink needs no
// ordering option: it never publishes past a failure, whatever the outbox's ordering.
//
// A message the sink refuses itself (no topic from Options.TopicFunc, a payload over
// Options.MaxPayloadBytes) fails with an error matching core.ErrPermanent: the engine
// marks it dead at once, and the messages after it, held back the same way, go in the
// next batch.
//
// Options.PublishBatchSize lets the sink hand several consecutive messages to one call,
// fewer round trips for publishers that batch; a failed call fails its whole run (each
// message of the run carries the publisher's error and is charged an attempt), and the
// part of it that did go out is delivered again later, with the same UUIDs. A publisher
// that implements PerMessagePublisher reports each message's fate and the sink names
// exactly the ones that failed in the run, then holds back the rest of the batch.
//
// When Deliver's context ends, the sink publishes nothing more: the messages not yet
// published are held back (their error matches core.ErrHeldBack and the context's
// error), or, when nothing was published, Deliver returns the context's error.
//
// Whether the consumer sees the order depends on the broker and the subscription: one
// queue with one consumer (AMQP), one partition per key (Kafka), an ordered consumer
// (JetStream). Watermill's GoChannel keeps the order only with
// BlockPublishUntilSubscriberAck; without it every message reaches the subscriber on its
// own goroutine. Delivery is at-least-once: deduplicate on the UUID.
//
// Deliver's context becomes each message's context (msg.Context()), which publishers
// that do network I/O use for their deadline. The sink never closes the publisher.
//
// # Trace context
//
// The envelope's headers become metadata, so the publisher's trace context (W3C
// traceparent and tracestate, which package outboxerotel stores when publishing is
// traced) reaches the subscriber. A handler continues the trace from it:
//
//	ctx := propagation.TraceContext{}.Extract(msg.Context(), propagation.MapCarrier(msg.Metadata))
//
// # CloudEvents
//
// With Options.CloudEvents every message is a CloudEvent 1.0. In the binary content mode
// (the default) the payload stays as is and the attributes are metadata named as the
// Kafka binding names its headers: ce_specversion, ce_id (the message UUID, the message
// key), ce_source (CloudEvents.Source), ce_type, ce_subject (the group key), ce_time and
// content-type; the envelope's headers become extensions, ce_<name> (the trace context as
// ce_traceparent: extract it from those keys). Published through watermill-kafka such a
// message is a binary-mode Kafka CloudEvent; AMQP and NATS carry the same keys as
// message headers. With CloudEvents.Structured the payload is the JSON event
// (content-type application/cloudevents+json). The outboxer_ metadata stays in both
// modes. A message that cannot be a valid CloudEvent (see ErrNotCloudEvent) goes dead
// at once.
//
// # Consuming with the inbox
//
// Middleware is a router middleware that runs the handler in a database transaction
// that first claims the message's key (its UUID, see MessageOf) in an inbox.Inbox; the
// handler writes through Tx(msg), and the router acks only after the commit, so a
// message delivered again does not run the handler twice.
//
// A message that carries neither a key nor MetadataID but is a CloudEvent (another
// publisher's, in either content mode, ce_ or AMQP-binding cloudEvents: names) is keyed
// on its CloudEvents id (see MessageOf). Any other message that carries neither
// (another publisher's, on a topic the sink shares) cannot be deduplicated and does not reach the handler: the
// OnForeign option, an inbox.ForeignPolicy, decides. By default (inbox.SkipForeign)
// the middleware acks it with a warning, so that the broker does not deliver it again;
// inbox.StopOnForeign fails it with an error matching inbox.ErrNoKey (the router nacks
// it); a function of yours can dead-letter it first (see ExampleOnForeign).
package watermillsink
