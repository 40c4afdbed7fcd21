package riversink

import (
	"encoding/json"
	"fmt"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/internal/cloudevents"
)

// MetadataCloudEvent is the job metadata key of the message's CloudEvent, with
// Options.CloudEvents: a JSON object in the CloudEvents JSON format, without data (the
// job's args carry the payload). A worker that passes the event on, or checks it,
// unmarshals it with any CloudEvents SDK's JSON format.
const MetadataCloudEvent = "cloudevent"

// ErrNotCloudEvent is the cause of a refused CloudEvents option, and, wrapped with
// core.Permanent, the failure of a message that cannot have a valid CloudEvent: a
// header whose name is not an extension name (lowercase a-z and 0-9, at most 20
// characters, not a name of the spec's attributes), or a type, group key or header value
// with control characters or invalid UTF-8. Match it with errors.Is.
var ErrNotCloudEvent = cloudevents.ErrNotCloudEvent

// CloudEvents adds each message's CloudEvent 1.0 attributes to its job's metadata
// (Options.CloudEvents, MetadataCloudEvent). River has no content modes: the job's args
// stay what Options.Job builds. The event's attributes:
//
//	specversion     1.0
//	id              the message key (MetadataKey): the same on every insert of a row's
//	                job, so a consumer deduplicates on it (the inbox does)
//	source          Source
//	type            the message type
//	subject         the group key (absent for unordered messages)
//	time            when the message was created (RFC 3339, UTC)
//	datacontenttype DataContentType, the payload's
//
// and the message's headers as extensions.
type CloudEvents struct {
	// Source is every event's source: a URI-reference naming the outbox (or its
	// service), such as "/orders" or "https://example.com/orders". Required.
	Source string
	// DataContentType is the payload's media type. Default "application/json", what the
	// default codec writes; set it when the outbox's codec writes something else.
	DataContentType string
}

func (c *CloudEvents) options() (*cloudevents.Options, error) {
	if c == nil {
		return nil, nil
	}
	o := &cloudevents.Options{Source: c.Source, DataContentType: c.DataContentType}
	if err := o.Check("CloudEvents"); err != nil {
		return nil, err
	}
	return o, nil
}

// withCloudEvent adds env's event, without data, to the encoded metadata object meta.
func withCloudEvent(o cloudevents.Options, meta []byte, env core.Envelope, key string) ([]byte, error) {
	ev, err := cloudevents.New(o, env, key, false)
	if err != nil {
		return nil, err
	}
	ev.Data = nil
	var m map[string]json.RawMessage
	if err := json.Unmarshal(meta, &m); err != nil {
		return nil, fmt.Errorf("message %d: job metadata: %w", env.ID, err)
	}
	m[MetadataCloudEvent] = ev.JSON()
	return json.Marshal(m)
}
