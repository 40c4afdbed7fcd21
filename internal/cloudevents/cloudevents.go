// Package cloudevents builds the CloudEvents 1.0 envelope the sinks put around a message
// when their CloudEvents option is set: the attributes (id, source, type, subject, time,
// extensions), the checks that make every event valid, and the JSON event format of the
// structured content mode. Each sink maps the attributes to its protocol's headers (the
// binary content mode) or sends the JSON as the body (the structured mode). It has no
// dependency on any CloudEvents SDK.
package cloudevents

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxer-go/outboxer/core"
)

const (
	// SpecVersion is the CloudEvents version of every event.
	SpecVersion = "1.0"
	// StructuredContentType is the content type of an event in the structured content
	// mode: the whole event as one JSON object.
	StructuredContentType = "application/cloudevents+json"
	// DefaultDataContentType is the datacontenttype when Options.DataContentType is
	// empty: the outbox's default codec writes JSON.
	DefaultDataContentType = "application/json"
	// MaxExtensionNameLength is the longest extension name accepted: the spec's
	// recommended limit, which some consumers enforce.
	MaxExtensionNameLength = 20
	// PartitionKey is the partitioning extension's attribute.
	PartitionKey = "partitionkey"
)

// ErrNotCloudEvent is the cause of every refusal: an option, a header name or a value
// that would not make a valid CloudEvent.
var ErrNotCloudEvent = errors.New("not a valid CloudEvent")

// Options are the CloudEvents settings of a sink, after its own validation.
type Options struct {
	// Source is the event's source: a URI-reference naming the outbox. Required.
	Source string
	// DataContentType is the payload's media type (datacontenttype). Default
	// DefaultDataContentType.
	DataContentType string
	// Structured selects the structured content mode; the binary mode otherwise.
	Structured bool
}

// Check validates o and fills in its defaults. The error names the field as field.
func (o *Options) Check(field string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: %s: %w", field, fmt.Sprintf(format, args...), ErrNotCloudEvent)
	}
	if strings.TrimSpace(o.Source) == "" {
		return bad("Source is required (a URI-reference naming the outbox, such as /orders or https://example.com/orders)")
	}
	if err := checkValue(o.Source); err != nil {
		return bad("Source %q: %v", o.Source, err)
	}
	if _, err := url.Parse(o.Source); err != nil {
		return bad("Source %q is not a URI-reference: %v", o.Source, err)
	}
	if o.DataContentType == "" {
		o.DataContentType = DefaultDataContentType
	}
	if _, _, err := mime.ParseMediaType(o.DataContentType); err != nil || checkValue(o.DataContentType) != nil {
		return bad("DataContentType %q is not a media type (RFC 2046)", o.DataContentType)
	}
	return nil
}

// Attr is one attribute of an event: its CloudEvents name (id, source, an extension's
// name) and its value in the canonical string form.
type Attr struct{ Name, Value string }

// Event is the envelope of one message.
type Event struct {
	// Attrs are the context attributes and the extensions, in a fixed order: specversion,
	// id, source, type, subject and time when set, then the extensions by name.
	// datacontenttype is not among them (each binding carries it its own way).
	Attrs           []Attr
	DataContentType string
	Data            []byte
}

// specAttrs are the names of the spec's own attributes, which an extension must not take.
var specAttrs = map[string]bool{
	"specversion": true, "id": true, "source": true, "type": true, "subject": true, "time": true,
	"datacontenttype": true, "dataschema": true, "data": true, "data_base64": true, PartitionKey: true,
}

// CheckName reports why name (a message header's) cannot be an extension's name, or nil:
// it must be 1 to MaxExtensionNameLength lowercase ASCII letters and digits, and not the
// name of one of the spec's attributes or of the partitionkey extension, which the sinks
// set themselves.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("an empty header name is not a CloudEvents extension name: %w", ErrNotCloudEvent)
	case len(name) > MaxExtensionNameLength:
		return fmt.Errorf("header name %q is not a CloudEvents extension name: longer than %d characters: %w", name, MaxExtensionNameLength, ErrNotCloudEvent)
	case specAttrs[name]:
		return fmt.Errorf("header name %q is the name of a CloudEvents attribute the sink sets: %w", name, ErrNotCloudEvent)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return fmt.Errorf("header name %q is not a CloudEvents extension name: only lowercase letters a-z and digits 0-9 are allowed: %w", name, ErrNotCloudEvent)
		}
	}
	return nil
}

// checkValue reports whether s is a CloudEvents String: valid UTF-8 without control
// characters (U+0000-U+001F, U+007F-U+009F) or noncharacters.
func checkValue(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("invalid UTF-8")
	}
	for _, c := range s {
		switch {
		case c <= 0x1f || (c >= 0x7f && c <= 0x9f):
			return fmt.Errorf("control character %U", c)
		case (c >= 0xfdd0 && c <= 0xfdef) || c&0xfffe == 0xfffe:
			return fmt.Errorf("noncharacter %U", c)
		}
	}
	return nil
}

// New builds the event of env with id (the message key), or explains, wrapping
// ErrNotCloudEvent, why env cannot be one: a header whose name is not an extension
// name (see CheckName), or a type, group key or header value that is not a CloudEvents
// String. With partitionKey, a message with a group key carries it as the partitionkey
// extension. o must have passed Check.
func New(o Options, env core.Envelope, id string, partitionKey bool) (Event, error) {
	bad := func(what, v string, err error) error {
		return fmt.Errorf("message %d: %s %q cannot be a CloudEvents attribute: %v: %w", env.ID, what, v, err, ErrNotCloudEvent)
	}
	if strings.TrimSpace(env.Type) == "" {
		return Event{}, fmt.Errorf("message %d: the type is empty, and a CloudEvent needs one: %w", env.ID, ErrNotCloudEvent)
	}
	if err := checkValue(env.Type); err != nil {
		return Event{}, bad("type", env.Type, err)
	}
	attrs := make([]Attr, 0, 7+len(env.Headers))
	attrs = append(attrs, Attr{"specversion", SpecVersion}, Attr{"id", id}, Attr{"source", o.Source}, Attr{"type", env.Type})
	if env.GroupKey != "" {
		if strings.TrimSpace(env.GroupKey) == "" {
			return Event{}, bad("group key", env.GroupKey, errors.New("blank (the subject must not be)"))
		}
		if err := checkValue(env.GroupKey); err != nil {
			return Event{}, bad("group key", env.GroupKey, err)
		}
		attrs = append(attrs, Attr{"subject", env.GroupKey})
	}
	if !env.CreatedAt.IsZero() {
		attrs = append(attrs, Attr{"time", env.CreatedAt.UTC().Format(time.RFC3339Nano)})
	}
	ext := make([]Attr, 0, len(env.Headers)+1)
	for k, v := range env.Headers {
		if err := CheckName(k); err != nil {
			return Event{}, fmt.Errorf("message %d: %w", env.ID, err)
		}
		if err := checkValue(v); err != nil {
			return Event{}, bad("header "+k+"'s value", v, err)
		}
		ext = append(ext, Attr{k, v})
	}
	if partitionKey && env.GroupKey != "" {
		ext = append(ext, Attr{PartitionKey, env.GroupKey})
	}
	sortAttrs(ext)
	return Event{Attrs: append(attrs, ext...), DataContentType: o.DataContentType, Data: env.Payload}, nil
}

func sortAttrs(a []Attr) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j].Name < a[j-1].Name; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// JSON returns the event in the JSON event format (the structured content mode's body):
// the attributes as members, and the payload as "data" when the datacontenttype is JSON
// and the payload is valid JSON, or else as "data_base64".
func (e Event) JSON() []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	member := func(name string, value []byte) {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		n, _ := json.Marshal(name)
		b.Write(n)
		b.WriteByte(':')
		b.Write(value)
	}
	str := func(s string) []byte {
		v, _ := json.Marshal(s) // a string always marshals
		return v
	}
	for _, a := range e.Attrs {
		member(a.Name, str(a.Value))
	}
	member("datacontenttype", str(e.DataContentType))
	switch {
	case len(e.Data) == 0:
	case isJSON(e.DataContentType) && json.Valid(e.Data):
		var c bytes.Buffer
		if json.Compact(&c, e.Data) == nil {
			member("data", c.Bytes())
		} else {
			member("data", e.Data)
		}
	default:
		member("data_base64", str(base64.StdEncoding.EncodeToString(e.Data)))
	}
	b.WriteByte('}')
	return b.Bytes()
}

// isJSON reports whether the media type is JSON: application/json, text/json or a
// +json suffix.
func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}
