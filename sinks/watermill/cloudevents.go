package watermillsink

import (
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/internal/cloudevents"
)

// The metadata of a CloudEvent in the binary content mode. Watermill's Pub/Subs carry
// metadata as their protocol's headers (Kafka record headers, AMQP message headers, NATS
// headers), so the sink names the keys as the Kafka binding names its headers:
// MetadataCloudEventsPrefix and the attribute's name (ce_id, ce_source, ce_specversion,
// ce_type, ce_subject, ce_time, ce_traceparent), and MetadataContentType for the
// datacontenttype. Published through watermill-kafka, such a message is a CloudEvent of
// the Kafka binding's binary mode. In the structured mode, MetadataContentType is
// ContentTypeCloudEvents and the payload is the event as JSON.
const (
	MetadataCloudEventsPrefix = "ce_"
	MetadataContentType       = "content-type"
	// ContentTypeCloudEvents is the content type of a structured-mode event.
	ContentTypeCloudEvents = cloudevents.StructuredContentType
)

// ErrNotCloudEvent is the cause of a refused CloudEvents option, and, wrapped with
// core.Permanent, the failure of a message that cannot be published as a valid
// CloudEvent: a header whose name is not an extension name (lowercase a-z and 0-9, at
// most 20 characters, not a name of the spec's attributes), or a type, group key or
// header value with control characters or invalid UTF-8. Match it with errors.Is.
var ErrNotCloudEvent = cloudevents.ErrNotCloudEvent

// CloudEvents makes the sink publish every message as a CloudEvent 1.0
// (Options.CloudEvents), in the binary content mode by default: the payload is the
// message's payload as before, and the attributes are metadata:
//
//	ce_specversion 1.0
//	ce_id          the message's UUID (MessageUUID, the message key): the same on every
//	               delivery of a row, so a consumer deduplicates on it (the inbox does)
//	ce_source      Source
//	ce_type        the message type
//	ce_subject     the group key (absent for unordered messages)
//	ce_time        when the message was created (RFC 3339, UTC)
//	content-type   DataContentType
//
// The message's own headers become extensions, ce_<name> (trace context as
// ce_traceparent and ce_tracestate), instead of metadata of their own name. The sink's
// Metadata* keys stay, so the consumer helpers work as without CloudEvents.
//
// With Structured, the payload is the whole event as JSON (content-type
// ContentTypeCloudEvents): the envelope's payload is its "data" when it is JSON and
// DataContentType says JSON, or else its "data_base64"; the message's headers are
// members of the event. Options.MaxPayloadBytes then bounds the JSON.
type CloudEvents struct {
	// Source is every event's source: a URI-reference naming the outbox (or its
	// service), such as "/orders" or "https://example.com/orders". Required.
	Source string
	// DataContentType is the payload's media type. Default "application/json", what the
	// default codec writes; set it when the outbox's codec writes something else.
	DataContentType string
	// Structured selects the structured content mode.
	Structured bool
}

func (c *CloudEvents) options() (*cloudevents.Options, error) {
	if c == nil {
		return nil, nil
	}
	o := &cloudevents.Options{Source: c.Source, DataContentType: c.DataContentType, Structured: c.Structured}
	if err := o.Check("CloudEvents"); err != nil {
		return nil, err
	}
	return o, nil
}

// cloudEvent builds env's CloudEvent message.
func (s *Sink) cloudEvent(env core.Envelope) (*message.Message, error) {
	uuid := MessageUUID(s.table, env.ID)
	ev, err := cloudevents.New(*s.ce, env, uuid, false)
	if err != nil {
		return nil, err
	}
	var msg *message.Message
	if s.ce.Structured {
		msg = message.NewMessage(uuid, ev.JSON())
		msg.Metadata.Set(MetadataContentType, ContentTypeCloudEvents)
	} else {
		msg = message.NewMessage(uuid, env.Payload)
		for _, a := range ev.Attrs {
			msg.Metadata.Set(MetadataCloudEventsPrefix+a.Name, a.Value)
		}
		msg.Metadata.Set(MetadataContentType, ev.DataContentType)
	}
	msg.Metadata.Set(MetadataID, strconv.FormatInt(env.ID, 10))
	msg.Metadata.Set(MetadataOutbox, env.Outbox)
	msg.Metadata.Set(MetadataType, env.Type)
	if env.GroupKey != "" {
		msg.Metadata.Set(MetadataGroupKey, env.GroupKey)
	}
	return msg, nil
}

// cloudEventKey is the inbox key of a message that is a CloudEvent (see MessageOf).
func cloudEventKey(msg *message.Message) (string, bool) {
	header := func(name string) (string, bool) {
		v, ok := msg.Metadata[name]
		return v, ok
	}
	return cloudevents.KeyOf(header, msg.Metadata.Get(MetadataContentType), msg.Payload)
}
