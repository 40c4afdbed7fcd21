package sqs

import (
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/internal/cloudevents"
)

// The message attributes of a CloudEvent in the binary content mode. SQS has no
// CloudEvents binding of its own; the relay names the attributes as the Kafka binding
// names its headers: AttrCloudEventsPrefix and the attribute's name (ce_id, ce_source,
// ce_specversion, ce_type, ce_subject, ce_time, ce_traceparent), and AttrContentType for
// the datacontenttype. In the structured mode, AttrContentType is ContentTypeCloudEvents
// and the body is the event as JSON.
const (
	AttrCloudEventsPrefix = "ce_"
	AttrContentType       = "content-type"
	// ContentTypeCloudEvents is the content type of a structured-mode event.
	ContentTypeCloudEvents = cloudevents.StructuredContentType
)

// ErrNotCloudEvent is the cause of a refused CloudEvents configuration, and, wrapped
// with core.Permanent, the failure of a message that cannot be sent as a valid
// CloudEvent: a header whose name is not an extension name (lowercase a-z and 0-9, at
// most 20 characters, not a name of the spec's attributes); a type, group key or header
// value with control characters or invalid UTF-8; and in the binary mode a header with
// an empty value, more headers than fit in SQS's 10 attributes, or a payload that is not
// text SQS can carry as the body. Match it with errors.Is.
var ErrNotCloudEvent = cloudevents.ErrNotCloudEvent

// CloudEvents makes the relay send every message as a CloudEvent 1.0 (Config.CloudEvents),
// in the binary content mode by default: the payload is the body as is, and the
// attributes are String message attributes:
//
//	ce_specversion 1.0
//	ce_id          the message key (AttrKey): the same on every delivery of a row, so a
//	               consumer deduplicates on it (the inbox does)
//	ce_source      Source
//	ce_type        the message type
//	ce_subject     the group key (absent for unordered messages)
//	ce_time        when the message was created (RFC 3339, UTC)
//	content-type   DataContentType
//	outboxer-key   the message key, as without CloudEvents, for the consumer helpers
//
// The message's own headers become extensions, ce_<name> (trace context as
// ce_traceparent and ce_tracestate). SQS allows 10 attributes, so a message can carry
// two headers (three without a group key); one with more fails permanently: use the
// structured mode for such messages. The binary mode sends the payload as the body
// unencoded, so it must be text SQS carries (valid UTF-8 without the characters it
// refuses); any other payload fails permanently too. AttrID, AttrType, AttrOutbox,
// AttrGroupKey, AttrEncoding and AttrHeaders are not set.
//
// With Structured, the body is the whole event as JSON (AttrContentType
// ContentTypeCloudEvents): the payload is its "data" when it is JSON and DataContentType
// says JSON, or else its "data_base64" (so any payload can be sent); the message's
// headers are members of the event. The relay's AttrID, AttrKey, AttrType, AttrOutbox
// and AttrGroupKey attributes are set as without CloudEvents.
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

// cloudEvent sets the body and attributes of env's entry for its event.
func (r *Relay) cloudEvent(e *types.SendMessageBatchRequestEntry, env core.Envelope) error {
	attr := func(name, typ, value string) {
		e.MessageAttributes[name] = types.MessageAttributeValue{DataType: aws.String(typ), StringValue: aws.String(value)}
	}
	bad := func(format string, args ...any) error {
		return core.Permanent(fmt.Errorf("sqs: message %d: %s: %w", env.ID, fmt.Sprintf(format, args...), ErrNotCloudEvent))
	}
	key := core.MessageKey(r.source, r.keyTable, env.ID)
	ev, err := cloudevents.New(*r.ce, env, key, false)
	if err != nil {
		return core.Permanent(fmt.Errorf("sqs: %w", err))
	}
	attr(AttrKey, "String", key)
	if r.ce.Structured {
		body := string(ev.JSON())
		if !validText(body) {
			return bad("the event's JSON has characters SQS refuses")
		}
		e.MessageBody = aws.String(body)
		attr(AttrContentType, "String", ContentTypeCloudEvents)
		attr(AttrID, "Number", strconv.FormatInt(env.ID, 10))
		attr(AttrType, "String", env.Type)
		if env.Outbox != "" {
			if !validText(env.Outbox) {
				return bad("the outbox name %q has characters SQS refuses", env.Outbox)
			}
			attr(AttrOutbox, "String", env.Outbox)
		}
		if env.GroupKey != "" {
			attr(AttrGroupKey, "String", env.GroupKey)
		}
		return nil
	}
	body := string(env.Payload)
	switch {
	case body == "":
		return core.Permanent(fmt.Errorf("sqs: message %d: the payload is empty, and SQS cannot carry an empty body", env.ID))
	case !validText(body):
		return bad("the binary content mode sends the payload as the body, and it is not text SQS carries: use CloudEvents.Structured")
	}
	e.MessageBody = aws.String(body)
	for _, a := range ev.Attrs {
		if a.Value == "" {
			return bad("header %q is empty, and SQS cannot carry an empty attribute", a.Name)
		}
		attr(AttrCloudEventsPrefix+a.Name, "String", a.Value)
	}
	attr(AttrContentType, "String", ev.DataContentType)
	if n := len(e.MessageAttributes); n > maxAttributes {
		return bad("%d headers and the event's attributes need %d message attributes, and SQS allows %d: use CloudEvents.Structured", len(env.Headers), n, maxAttributes)
	}
	return nil
}

// cloudEventKey is the inbox key of a message that is a CloudEvent (see MessageOf).
func cloudEventKey(m types.Message) (string, bool) {
	header := func(name string) (string, bool) {
		v, ok := m.MessageAttributes[name]
		if !ok || v.StringValue == nil {
			return "", false
		}
		return *v.StringValue, true
	}
	ct, _ := header(AttrContentType)
	return cloudevents.KeyOf(header, ct, []byte(aws.ToString(m.Body)))
}
