package sqs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/outboxer-go/outboxer/core"
	outboxsqs "github.com/outboxer-go/outboxer/sinks/sqs"
)

// ceMessage is a received message as a CloudEvents SDK binding reads one, with the
// relay's attribute names (those of the Kafka binding): binary when it has a
// ce_specversion attribute, structured when its content-type is an event format.
type ceMessage struct {
	headers map[string]string
	value   []byte // the body
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

// toEvent decodes m with the SDK and validates the event.
func toEvent(t *testing.T, m types.Message) (*event.Event, map[string]string) {
	t.Helper()
	msg := ceMessage{headers: map[string]string{}, value: []byte(aws.ToString(m.Body))}
	for k, v := range m.MessageAttributes {
		msg.headers[k] = aws.ToString(v.StringValue)
	}
	ev, err := binding.ToEvent(context.Background(), msg)
	if err != nil {
		t.Fatalf("decoding the CloudEvent: %v", err)
	}
	if err := ev.Validate(); err != nil {
		t.Fatalf("invalid CloudEvent %v: %v", ev, err)
	}
	return ev, msg.headers
}

// TestCloudEventsOnTheWire sends messages as CloudEvents in both content modes through
// the SQS emulator and decodes what a consumer receives with the CloudEvents SDK: the
// attributes the outbox promises, the headers as extensions, the payload as the data.
// Messages whose headers or values cannot be a CloudEvent fail permanently and alone.
func TestCloudEventsOnTheWire(t *testing.T) {
	needEmulator(t)
	t.Parallel()
	for _, structured := range []bool{false, true} {
		t.Run("structured="+strconv.FormatBool(structured), func(t *testing.T) {
			t.Parallel()
			queue := newQueue(t, true)
			relay := newRelay(t, outboxsqs.Config{Client: newClient(endpoint), QueueURL: queue, Table: "orders_outbox", Source: "db1",
				CloudEvents: &outboxsqs.CloudEvents{Source: "/shop/orders", Structured: structured}})
			created := time.Date(2026, 3, 4, 5, 6, 7, 891011000, time.FixedZone("x", 3600))
			hostile := "\"quoted\" <b>&amp; ü \u4e2d \\ \u2028 end" // the emulator refuses characters past U+FFFF, which SQS takes
			good := []core.Envelope{
				{ID: 1, Outbox: "orders", Type: "order.created", GroupKey: "order-7", CreatedAt: created,
					Payload: []byte(`{"n": 1, "s": "x"}`),
					Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tenant": hostile}},
				{ID: 2, Outbox: "orders", Type: "order.paid", CreatedAt: created, Payload: []byte(`"text"`),
					Headers: map[string]string{"a": "1", "b": "2", "c": "3"}},
			}
			bad := map[int64]core.Envelope{
				10: {ID: 10, Type: "t", Payload: []byte("{}"), Headers: map[string]string{"X-Request-Id": "1"}},
				11: {ID: 11, Type: "t", Payload: []byte("{}"), Headers: map[string]string{"content-type": "text/plain"}},
				12: {ID: 12, Type: "t", Payload: []byte("{}"), Headers: map[string]string{"id": "spoofed"}},
				13: {ID: 13, Type: "t", Payload: []byte("{}"), Headers: map[string]string{"ce_id": "spoofed"}},
				14: {ID: 14, Type: "t", Payload: []byte("{}"), Headers: map[string]string{"averyveryverylongname1": "v"}},
				15: {ID: 15, Type: "t", Payload: []byte("{}"), Headers: map[string]string{"ok": "line\nbreak"}},
				16: {ID: 16, Type: "t", Payload: []byte("{}"), Headers: map[string]string{"ok": "nul\x00"}},
				17: {ID: 17, Type: "t", Payload: []byte("{}"), Headers: map[string]string{"ok": "\xff\xfe"}},
				18: {ID: 18, Type: "bad\x7ftype", Payload: []byte("{}")},
				19: {ID: 19, Type: "t", GroupKey: "\t ", Payload: []byte("{}")},
				20: {ID: 20, Type: "t", Payload: []byte("{}"), Headers: map[string]string{"Tenant": "v"}},
			}
			if structured {
				// Binary payloads and many or empty headers go in the JSON event.
				good = append(good, core.Envelope{ID: 3, Outbox: "orders", Type: "blob", GroupKey: "order-8", CreatedAt: created,
					Payload: []byte{0, 1, 0xff, '"'}, Headers: map[string]string{"h1": "1", "h2": "2", "h3": "3", "h4": "4", "h5": "", "h6": "6",
						"h7": "7", "h8": "8", "h9": "9", "h10": "10"}})
			} else {
				bad[30] = core.Envelope{ID: 30, Type: "t", GroupKey: "g", CreatedAt: created, Payload: []byte("{}"), Headers: map[string]string{"a": "1", "b": "2", "c": "3"}}
				bad[31] = core.Envelope{ID: 31, Type: "t", Payload: []byte("{}"), Headers: map[string]string{"empty": ""}}
				bad[32] = core.Envelope{ID: 32, Type: "t", Payload: []byte{0, 1, 0xff}}
			}
			var batch []core.Envelope
			batch = append(batch, good[0])
			for id := int64(10); id <= 32; id++ {
				if env, ok := bad[id]; ok {
					batch = append(batch, env)
				}
			}
			batch = append(batch, good[1:]...)
			err := relay.Deliver(context.Background(), batch)
			var pf *core.PartialFailure
			if !errors.As(err, &pf) {
				t.Fatalf("Deliver: %v, want the %d bad messages to fail", err, len(bad))
			}
			for id := range bad {
				if pf.Failed[id] == nil {
					t.Errorf("message %d was delivered", id)
				}
			}
			for id, err := range pf.Failed {
				if _, ok := bad[id]; !ok || !errors.Is(err, core.ErrPermanent) || !errors.Is(err, outboxsqs.ErrNotCloudEvent) {
					t.Errorf("message %d failed with %v; want only the bad ones, permanently, with ErrNotCloudEvent", id, err)
				}
			}

			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			byID := map[string]types.Message{}
			for _, m := range receiveAll(t, ctx, queue, len(good)) {
				ev, _ := toEvent(t, m)
				byID[ev.ID()] = m
			}
			for _, env := range good {
				key := core.MessageKey("db1", "orders_outbox", env.ID)
				m, ok := byID[key]
				if !ok {
					t.Fatalf("no event with id %s (message %d)", key, env.ID)
				}
				ev, attrs := toEvent(t, m)
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
				got := ev.Extensions()
				if len(got) != len(env.Headers) {
					t.Errorf("message %d: extensions %v, want %v", env.ID, got, env.Headers)
				}
				for k, v := range env.Headers {
					if got[k] != v {
						t.Errorf("message %d: extension %s = %q, want %q", env.ID, k, got[k], v)
					}
				}
				if attrs[outboxsqs.AttrKey] != key {
					t.Errorf("message %d: attributes %v lack the message key", env.ID, attrs)
				}
			}
		})
	}
}

func TestCloudEventsConfigValidated(t *testing.T) {
	t.Parallel()
	for name, ce := range map[string]outboxsqs.CloudEvents{
		"no source":    {},
		"blank source": {Source: "  "},
		"bad source":   {Source: "/a\nb"},
		"not a uri":    {Source: "%zz"},
		"content type": {Source: "/s", DataContentType: "not a media type"},
	} {
		_, err := outboxsqs.New(outboxsqs.Config{Client: newClient("http://127.0.0.1:1"), QueueURL: "http://127.0.0.1:1/q.fifo", CloudEvents: &ce})
		if !errors.Is(err, outboxsqs.ErrNotCloudEvent) || !strings.Contains(err.Error(), "Config.CloudEvents") {
			t.Errorf("%s: New: %v, want an error naming Config.CloudEvents and matching ErrNotCloudEvent", name, err)
		}
	}
}
