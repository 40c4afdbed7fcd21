// Package sqs is an Outboxer relay that sends messages to an Amazon SQS queue with the
// AWS SDK for Go v2.
//
// # FIFO queues
//
// A queue whose URL ends in ".fifo" keeps order within a message group:
//
//   - MessageGroupId is the message's group key (Config.Ordering core.OrderGroup, the
//     default), the outbox name (core.OrderTotal), or one group per message for messages
//     without a key and for core.OrderNone, so consumers can take those in parallel;
//   - MessageDeduplicationId is "<Config.Table>:<ID>" (the outbox name stands in for an
//     unset Table), so a batch delivered again after a crash is dropped by SQS within
//     its five-minute deduplication window.
//
// Keys and IDs SQS would refuse (over 128 characters, or other than letters, digits and
// punctuation) are replaced by their hex SHA-256, which keeps them distinct and stable.
//
// # Standard queues
//
// They keep no order and may deliver twice: New refuses one for an outbox whose Ordering
// needs order unless Config.AllowUnordered is set, and then logs a warning.
//
// # Messages
//
// The body is the payload when it is text SQS can carry, otherwise its standard base64
// with the attribute AttrEncoding ("outboxer-encoding") set to "base64". Attributes
// AttrID, AttrType, AttrOutbox and AttrGroupKey carry the envelope's fields. Each header
// becomes a String attribute of its own when all fit within SQS's 10 attributes with
// valid names and non-empty values; otherwise all headers travel together as one JSON
// object in AttrHeaders ("outboxer-headers"). A message larger than
// Config.MaxMessageBytes (body and attributes), or with an empty payload, is refused with
// core.Permanent: it goes dead instead of holding back its group forever.
//
// # Results
//
// Deliver sends a batch in SendMessageBatch requests of at most 10 entries, in order. A
// request that fails names its messages in a *core.PartialFailure; the later messages
// of their groups are not sent and are named too; other groups go on. Entries SQS
// refuses as the sender's fault are permanent; others are retried by the engine.
//
// # Trace context
//
// The publisher's trace context (W3C traceparent and tracestate, which package
// outboxerotel stores in the headers when publishing is traced) travels like any other
// header: as String attributes, or inside AttrHeaders when the headers do not fit. A
// consumer that receives with MessageAttributeNames ["All"] reads the headers back and
// continues the trace:
//
//	h := map[string]string{}
//	for k, v := range m.MessageAttributes { h[k] = aws.ToString(v.StringValue) }
//	if j, ok := h[sqs.AttrHeaders]; ok { _ = json.Unmarshal([]byte(j), &h) }
//	ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(h))
//
// # CloudEvents
//
// With Config.CloudEvents every message is a CloudEvent 1.0. SQS has no CloudEvents
// binding, so in the binary content mode (the default) the relay names the String
// attributes as the Kafka binding names its headers: ce_specversion, ce_id (the message
// key, so the id is the same on every delivery), ce_source (CloudEvents.Source), ce_type
// (the message type), ce_subject (the group key), ce_time (when the message was
// created) and content-type (CloudEvents.DataContentType), with AttrKey kept; the body
// is the payload. The message's headers become extensions, ce_<name> (the trace context
// as ce_traceparent and ce_tracestate); that leaves room for two of them (three without
// a group key) in SQS's 10 attributes. With CloudEvents.Structured the body is the JSON
// event (content-type application/cloudevents+json), which carries any payload (as
// data_base64 when it is not JSON) and any number of headers, and the relay's AttrID,
// AttrKey, AttrType, AttrOutbox and AttrGroupKey attributes are set as without
// CloudEvents. A message that cannot be a valid CloudEvent (see ErrNotCloudEvent) goes
// dead at once.
//
// # Consuming with the inbox
//
// Every message carries the AttrKey attribute (outboxer-key), the key a consumer
// deduplicates on. NewConsumer wraps an SQS client and an inbox.Inbox: each message's
// handler runs in a database transaction that first claims the key, and the message is
// deleted only after the commit, so a message received again (sent twice by the relay,
// or back after its visibility timeout) does not run the handler twice. CheckRedelivery
// checks that the inbox's window covers the queue's visibility timeout × max receives.
//
// A message without AttrKey that is a CloudEvent (another producer's, in either content
// mode) is keyed on its CloudEvents id (see MessageOf). Any other message without AttrKey
// (another producer's, on a queue the relay shares) cannot be deduplicated and does not reach the handler: ConsumerConfig.OnForeign, an
// inbox.ForeignPolicy, decides. By default (inbox.SkipForeign) the consumer logs a
// warning and deletes it; inbox.StopOnForeign makes Run return an error matching
// inbox.ErrNoKey and leaves the message in the queue; a function of yours can
// dead-letter it first (see ExampleConsumerConfig_onForeign).
package sqs
