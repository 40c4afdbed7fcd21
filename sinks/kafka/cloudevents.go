package kafka

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/internal/cloudevents"
)

// The headers of a CloudEvent in the Kafka protocol binding's binary content mode: each
// attribute is a header named HeaderCloudEventsPrefix and the attribute's name (ce_id,
// ce_source, ce_specversion, ce_type, ce_subject, ce_time, ce_partitionkey, ce_traceparent),
// and the datacontenttype is HeaderContentType. In the structured mode, HeaderContentType
// is ContentTypeCloudEvents and the value is the event as JSON.
const (
	HeaderCloudEventsPrefix = "ce_"
	HeaderContentType       = "content-type"
	// ContentTypeCloudEvents is the content type of a structured-mode event.
	ContentTypeCloudEvents = cloudevents.StructuredContentType
)

// ErrNotCloudEvent is the cause of a refused CloudEvents configuration, and, wrapped
// with core.Permanent, the failure of a message that cannot be a valid CloudEvent: a
// header whose name is not an extension name (lowercase a-z and 0-9, at most 20
// characters, not a name of the spec's attributes), or a type, group key or header value
// with control characters or invalid UTF-8. Match it with errors.Is.
var ErrNotCloudEvent = cloudevents.ErrNotCloudEvent

// CloudEvents makes the relay send every message as a CloudEvent 1.0 (Config.CloudEvents),
// in the Kafka protocol binding's binary content mode by default: the payload is the
// record's value as before, and the attributes are headers:
//
//	ce_specversion  1.0
//	ce_id           the message key (HeaderKey): the same on every delivery of a row, so a
//	                consumer deduplicates on it (the inbox does)
//	ce_source       Source
//	ce_type         the message type
//	ce_subject      the group key (absent for unordered messages)
//	ce_time         when the message was created (RFC 3339, UTC)
//	ce_partitionkey the group key, which is also the record key, as today
//	content-type    DataContentType
//
// The message's own headers become extensions, ce_<name> (trace context as
// ce_traceparent and ce_tracestate, the spec's distributed tracing extension), instead
// of headers of their own name. The relay's HeaderID, HeaderType, HeaderOutbox and
// HeaderKey headers stay, so the consumer helpers work as without CloudEvents.
//
// With Structured, the value is the whole event as JSON (content-type
// ContentTypeCloudEvents): the payload is its "data" when it is JSON and DataContentType
// says JSON, or else its "data_base64"; the message's headers are members of the event.
//
// A message that cannot be a valid CloudEvent fails permanently, with ErrNotCloudEvent:
// see there.
type CloudEvents struct {
	// Source is every event's source: a URI-reference naming the outbox (or its
	// service), such as "/orders" or "https://example.com/orders". Required; with the
	// message key as id, the pair is unique.
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

// cloudEvent sets rec's value and headers (before the relay's own) for env's event.
func (r *Relay) cloudEvent(rec *kgo.Record, env core.Envelope, key string) error {
	ev, err := cloudevents.New(*r.ce, env, key, true)
	if err != nil {
		return err
	}
	if r.ce.Structured {
		rec.Value = ev.JSON()
		rec.Headers = append(make([]kgo.RecordHeader, 0, 5), kgo.RecordHeader{Key: HeaderContentType, Value: []byte(ContentTypeCloudEvents)})
		return nil
	}
	rec.Headers = make([]kgo.RecordHeader, 0, len(ev.Attrs)+5)
	for _, a := range ev.Attrs {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderCloudEventsPrefix + a.Name, Value: []byte(a.Value)})
	}
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderContentType, Value: []byte(ev.DataContentType)})
	return nil
}

// cloudEventKey is the inbox key of a record that is a CloudEvent (see MessageOf).
func cloudEventKey(rec *kgo.Record) (string, bool) {
	header := func(name string) (string, bool) {
		for i := len(rec.Headers) - 1; i >= 0; i-- {
			if rec.Headers[i].Key == name {
				return string(rec.Headers[i].Value), true
			}
		}
		return "", false
	}
	ct, _ := header(HeaderContentType)
	return cloudevents.KeyOf(header, ct, rec.Value)
}
