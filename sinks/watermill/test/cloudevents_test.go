package watermillsink_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/outboxer-go/outboxer/core"
	watermillsink "github.com/outboxer-go/outboxer/sinks/watermill"
)

// ceMessage is a received message as a CloudEvents SDK binding reads one, with the
// sink's metadata keys (the Kafka binding's header names): binary when it has a
// ce_specversion attribute, structured when its content-type is an event format.
type ceMessage struct {
	headers map[string]string
	value   []byte // the payload
}

var ceSpecs = spec.WithPrefix("ce_")

func (m ceMessage) ReadEncoding() binding.Encoding {
	switch {
	case m.headers["ce_specversion"] != "":
		return binding.EncodingBinary
	case format.Lookup(m.headers["content-type"]) != nil:
		return binding.EncodingStructured
	}
	return binding.EncodingUnknown
}

func (m ceMessage) ReadStructured(ctx context.Context, w binding.StructuredWriter) error {
	f := format.Lookup(m.headers["content-type"])
	if f == nil {
		return binding.ErrNotStructured
	}
	return w.SetStructuredEvent(ctx, f, bytes.NewReader(m.value))
}

func (m ceMessage) ReadBinary(ctx context.Context, w binding.BinaryWriter) error {
	v := ceSpecs.Version(m.headers["ce_specversion"])
	if v == nil {
		return fmt.Errorf("unknown ce_specversion %q", m.headers["ce_specversion"])
	}
	var err error
	for k, val := range m.headers {
		if a := v.Attribute(k); a != nil {
			err = w.SetAttribute(a, val)
		} else if name, ok := strings.CutPrefix(k, "ce_"); ok {
			err = w.SetExtension(name, val)
		}
		if err != nil {
			return err
		}
	}
	if ct, ok := m.headers["content-type"]; ok {
		if err := w.SetAttribute(v.AttributeFromKind(spec.DataContentType), ct); err != nil {
			return err
		}
	}
	if len(m.value) > 0 {
		return w.SetData(bytes.NewReader(m.value))
	}
	return nil
}

func (m ceMessage) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	v := ceSpecs.Version(m.headers["ce_specversion"])
	if v == nil {
		return nil, nil
	}
	a := v.AttributeFromKind(k)
	name := "content-type"
	if a != nil && k != spec.DataContentType {
		name = a.PrefixedName()
	}
	if val, ok := m.headers[name]; ok {
		return a, val
	}
	return a, nil
}

func (m ceMessage) GetExtension(name string) any {
	if val, ok := m.headers["ce_"+name]; ok {
		return val
	}
	return nil
}

func (ceMessage) Finish(error) error { return nil }

// toEvent decodes msg with the SDK and validates the event.
func toEvent(t *testing.T, msg *message.Message) *event.Event {
	t.Helper()
	m := ceMessage{headers: map[string]string(msg.Metadata), value: msg.Payload}
	ev, err := binding.ToEvent(context.Background(), m)
	if err != nil {
		t.Fatalf("decoding the CloudEvent: %v", err)
	}
	if err := ev.Validate(); err != nil {
		t.Fatalf("invalid CloudEvent %v: %v", ev, err)
	}
	return ev
}

// TestCloudEventsOnTheWire publishes messages as CloudEvents in both content modes
// through RabbitMQ and decodes what a subscriber receives with the CloudEvents SDK: the
// attributes the outbox promises, the headers as extensions, the payload as the data.
// Messages whose headers or values cannot be a CloudEvent fail permanently and alone.
func TestCloudEventsOnTheWire(t *testing.T) {
	t.Parallel()
	for _, structured := range []bool{false, true} {
		t.Run("structured="+strconv.FormatBool(structured), func(t *testing.T) {
			t.Parallel()
			q := newRabbitQueue(t)
			sink, err := watermillsink.New(q.pub, watermillsink.Options{Topic: q.name, Table: "orders_outbox",
				CloudEvents: &watermillsink.CloudEvents{Source: "/shop/orders", Structured: structured}})
			if err != nil {
				t.Fatal(err)
			}
			created := time.Date(2026, 3, 4, 5, 6, 7, 891011000, time.FixedZone("x", 3600))
			hostile := "\"quoted\" <b>&amp; ü 😀 \\ \u2028 end"
			good := []core.Envelope{
				{ID: 1, Outbox: "orders", Type: "order.created", GroupKey: "order-7", CreatedAt: created,
					Payload: []byte(`{"n": 1, "s": "x"}`),
					Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tenant": hostile, "x9": ""}},
				{ID: 2, Outbox: "orders", Type: "order.paid", CreatedAt: created, Payload: []byte{0, 1, 0xff, '"'}},
			}
			bad := map[int64]core.Envelope{
				10: {ID: 10, Type: "t", Headers: map[string]string{"X-Request-Id": "1"}},
				11: {ID: 11, Type: "t", Headers: map[string]string{"content-type": "text/plain"}},
				12: {ID: 12, Type: "t", Headers: map[string]string{"id": "spoofed"}},
				13: {ID: 13, Type: "t", Headers: map[string]string{"ce_id": "spoofed"}},
				14: {ID: 14, Type: "t", Headers: map[string]string{"averyveryverylongname1": "v"}},
				15: {ID: 15, Type: "t", Headers: map[string]string{"ok": "line\nbreak"}},
				16: {ID: 16, Type: "t", Headers: map[string]string{"ok": "nul\x00"}},
				17: {ID: 17, Type: "t", Headers: map[string]string{"ok": "\xff\xfe"}},
				18: {ID: 18, Type: "bad\x7ftype"},
				19: {ID: 19, Type: "t", GroupKey: "\t "},
				20: {ID: 20, Type: "t", Headers: map[string]string{"Tenant": "v"}},
			}
			// The sink stops at a failed message, so each bad one goes alone.
			for id, env := range bad {
				err := sink.Deliver(context.Background(), []core.Envelope{env})
				var pf *core.PartialFailure
				if !errors.As(err, &pf) || !errors.Is(pf.Failed[id], core.ErrPermanent) || !errors.Is(pf.Failed[id], watermillsink.ErrNotCloudEvent) {
					t.Errorf("message %d: Deliver: %v, want a permanent failure with ErrNotCloudEvent", id, err)
				}
			}
			got := q.consume(t, len(good), 20*time.Second)
			if err := sink.Deliver(context.Background(), good); err != nil {
				t.Fatalf("Deliver: %v", err)
			}
			msgs := <-got
			if len(msgs) != len(good) {
				t.Fatalf("received %d messages, want %d (the bad ones must not be published)", len(msgs), len(good))
			}
			for i, env := range good {
				msg := msgs[i]
				ev := toEvent(t, msg)
				if key := core.MessageKey("", "orders_outbox", env.ID); ev.ID() != key || msg.UUID != key {
					t.Errorf("message %d: id %s, UUID %s, want both the message key %s", env.ID, ev.ID(), msg.UUID, key)
				}
				if ev.SpecVersion() != "1.0" || ev.Source() != "/shop/orders" || ev.Type() != env.Type ||
					ev.Subject() != env.GroupKey || !ev.Time().Equal(env.CreatedAt) || ev.DataContentType() != "application/json" {
					t.Errorf("message %d: event %v", env.ID, ev)
				}
				wantData := string(env.Payload)
				if structured && env.ID == 1 {
					wantData = `{"n":1,"s":"x"}` // embedded as JSON
				}
				if string(ev.Data()) != wantData {
					t.Errorf("message %d: data %q, want %q", env.ID, ev.Data(), wantData)
				}
				exts := ev.Extensions()
				if len(exts) != len(env.Headers) {
					t.Errorf("message %d: extensions %v, want %v", env.ID, exts, env.Headers)
				}
				for k, v := range env.Headers {
					if exts[k] != v {
						t.Errorf("message %d: extension %s = %q, want %q", env.ID, k, exts[k], v)
					}
				}
				if msg.Metadata.Get(watermillsink.MetadataID) != strconv.FormatInt(env.ID, 10) {
					t.Errorf("message %d: metadata %v lack the sink's", env.ID, msg.Metadata)
				}
				if _, ok := msg.Metadata["traceparent"]; ok {
					t.Errorf("message %d: metadata traceparent sent besides ce_traceparent", env.ID)
				}
			}
		})
	}
}

func TestCloudEventsOptionValidated(t *testing.T) {
	t.Parallel()
	for name, ce := range map[string]watermillsink.CloudEvents{
		"no source":    {},
		"blank source": {Source: "  "},
		"bad source":   {Source: "/a\nb"},
		"not a uri":    {Source: "%zz"},
		"content type": {Source: "/s", DataContentType: "not a media type"},
	} {
		_, err := watermillsink.New(nopPublisher{}, watermillsink.Options{Topic: "t", CloudEvents: &ce})
		if !errors.Is(err, watermillsink.ErrNotCloudEvent) || !strings.Contains(err.Error(), "Options.CloudEvents") {
			t.Errorf("%s: New: %v, want an error naming Options.CloudEvents and matching ErrNotCloudEvent", name, err)
		}
	}
}

type nopPublisher struct{}

func (nopPublisher) Publish(string, ...*message.Message) error { return nil }
func (nopPublisher) Close() error                              { return nil }
