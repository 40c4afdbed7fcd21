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
// in batch order, and stops at the first failure: Deliver returns a *core.PartialFailure
// naming the failed message and every message after it (those wrap ErrEarlierFailed).
// Within a group the broker thus sees the messages in order, and a failed message is
// retried before anything after it is sent. Options.PublishBatchSize lets the sink hand
// several consecutive messages to one call, fewer round trips for publishers that batch;
// a failed call then fails its whole run, and the part of it that did go out is
// delivered again later (with the same UUIDs). A publisher that implements
// PerMessagePublisher reports each message's fate and the sink maps it exactly.
//
// Whether the consumer sees the order depends on the broker and the subscription: one
// queue with one consumer (AMQP), one partition per key (Kafka), an ordered consumer
// (JetStream). Watermill's GoChannel keeps the order only with
// BlockPublishUntilSubscriberAck; without it every message reaches the subscriber on its
// own goroutine. Delivery is at-least-once: deduplicate on the UUID.
//
// Deliver's context becomes each message's context (msg.Context()), which publishers
// that do network I/O use for their deadline. The sink never closes the publisher.
package watermillsink
