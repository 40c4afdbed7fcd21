package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/sinks/kafka"
)

// ceRecord is a record as the CloudEvents SDK's Kafka bindings read one: binary when it
// has a ce_specversion header, structured when its content-type is an event format.
type ceRecord struct {
	headers map[string]string
	value   []byte
}

var ceSpecs = spec.WithPrefix("ce_")

func (m ceRecord) ReadEncoding() binding.Encoding {
	switch {
	case m.headers["ce_specversion"] != "":
		return binding.EncodingBinary
	case format.Lookup(m.headers["content-type"]) != nil:
		return binding.EncodingStructured
	}
	return binding.EncodingUnknown
}

func (m ceRecord) ReadStructured(ctx context.Context, w binding.StructuredWriter) error {
	f := format.Lookup(m.headers["content-type"])
	if f == nil {
		return binding.ErrNotStructured
	}
	return w.SetStructuredEvent(ctx, f, bytes.NewReader(m.value))
}

func (m ceRecord) ReadBinary(ctx context.Context, w binding.BinaryWriter) error {
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

func (m ceRecord) GetAttribute(k spec.Kind) (spec.Attribute, any) {
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

func (m ceRecord) GetExtension(name string) any {
	if val, ok := m.headers["ce_"+name]; ok {
		return val
	}
	return nil
}

func (ceRecord) Finish(error) error { return nil }

// toEvent decodes rec with the SDK and validates the event.
func toEvent(t *testing.T, rec *kgo.Record) *event.Event {
	t.Helper()
	m := ceRecord{headers: map[string]string{}, value: rec.Value}
	for _, h := range rec.Headers {
		if _, dup := m.headers[h.Key]; dup {
			t.Fatalf("record has header %q twice", h.Key)
		}
		m.headers[h.Key] = string(h.Value)
	}
	ev, err := binding.ToEvent(context.Background(), m)
	if err != nil {
		t.Fatalf("decoding the CloudEvent: %v", err)
	}
	if err := ev.Validate(); err != nil {
		t.Fatalf("invalid CloudEvent %v: %v", ev, err)
	}
	return ev
}

// TestCloudEventsOnTheWire sends messages as CloudEvents in both content modes through a
// Kafka cluster and decodes what a consumer reads with the CloudEvents SDK: the
// attributes the outbox promises, the headers as extensions, the payload as the data.
// Messages whose headers or values cannot be a CloudEvent fail permanently and alone.
func TestCloudEventsOnTheWire(t *testing.T) {
	t.Parallel()
	for _, structured := range []bool{false, true} {
		t.Run("structured="+strconv.FormatBool(structured), func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, "events")
			brokers := c.ListenAddrs()
			relay := newRelay(t, kafka.Config{Brokers: brokers, Topic: "events", Table: "orders_outbox",
				CloudEvents: &kafka.CloudEvents{Source: "/shop/orders", Structured: structured}})
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
				13: {ID: 13, Type: "t", Headers: map[string]string{"partitionkey": "p"}},
				14: {ID: 14, Type: "t", Headers: map[string]string{"ce_id": "spoofed"}},
				15: {ID: 15, Type: "t", Headers: map[string]string{"averyveryverylongname1": "v"}},
				16: {ID: 16, Type: "t", Headers: map[string]string{"": "v"}},
				17: {ID: 17, Type: "t", Headers: map[string]string{"ok": "line\nbreak"}},
				18: {ID: 18, Type: "t", Headers: map[string]string{"ok": "nul\x00"}},
				19: {ID: 19, Type: "t", Headers: map[string]string{"ok": "\xff\xfe"}},
				20: {ID: 20, Type: "bad\x7ftype"},
				21: {ID: 21, Type: "   "},
				22: {ID: 22, Type: "t", GroupKey: "\t "},
				23: {ID: 23, Type: "t", Headers: map[string]string{"Tenant": "v"}},
			}
			batch := append([]core.Envelope{}, good[0])
			for id := int64(10); id <= 23; id++ {
				batch = append(batch, bad[id])
			}
			batch = append(batch, good[1])
			err := relay.Deliver(context.Background(), batch)
			var pf *core.PartialFailure
			if !errors.As(err, &pf) || len(pf.Failed) != len(bad) {
				t.Fatalf("Deliver: %v, want the %d bad messages to fail", err, len(bad))
			}
			for id, err := range pf.Failed {
				if _, ok := bad[id]; !ok || !errors.Is(err, core.ErrPermanent) || !errors.Is(err, kafka.ErrNotCloudEvent) {
					t.Errorf("message %d failed with %v; want only the bad ones, permanently, with ErrNotCloudEvent", id, err)
				}
			}

			cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("events"),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			recs := fetch(t, ctx, cl, len(good))
			byID := map[string]*kgo.Record{}
			for _, rec := range recs {
				byID[toEvent(t, rec).ID()] = rec
			}
			for _, env := range good {
				key := core.MessageKey("", "orders_outbox", env.ID)
				rec := byID[key]
				if rec == nil {
					t.Fatalf("no event with id %s (message %d)", key, env.ID)
				}
				ev := toEvent(t, rec)
				if ev.SpecVersion() != "1.0" || ev.Source() != "/shop/orders" || ev.Type() != env.Type ||
					ev.Subject() != env.GroupKey || !ev.Time().Equal(env.CreatedAt) || ev.DataContentType() != "application/json" {
					t.Errorf("message %d: event %v", env.ID, ev)
				}
				if !bytes.Equal(ev.Data(), env.Payload) && !(structured && env.ID == 1) {
					t.Errorf("message %d: data %q, want %q", env.ID, ev.Data(), env.Payload)
				}
				if structured && env.ID == 1 && string(ev.Data()) != `{"n":1,"s":"x"}` {
					t.Errorf("message 1: data %s, want the payload as JSON", ev.Data())
				}
				if string(rec.Key) != env.GroupKey {
					t.Errorf("message %d: record key %q, want the group key", env.ID, rec.Key)
				}
				want := map[string]any{}
				for k, v := range env.Headers {
					want[k] = v
				}
				if env.GroupKey != "" {
					want["partitionkey"] = env.GroupKey
				}
				got := ev.Extensions()
				if len(got) != len(want) {
					t.Errorf("message %d: extensions %v, want %v", env.ID, got, want)
				}
				for k, v := range want {
					if got[k] != v {
						t.Errorf("message %d: extension %s = %q, want %q", env.ID, k, got[k], v)
					}
				}
				// The relay's own headers stay, for the consumer helpers; the message's
				// headers are not repeated under their own names.
				hs := map[string]string{}
				for _, h := range rec.Headers {
					hs[h.Key] = string(h.Value)
				}
				if hs[kafka.HeaderKey] != key || hs[kafka.HeaderID] != strconv.FormatInt(env.ID, 10) {
					t.Errorf("message %d: headers %v lack the relay's", env.ID, hs)
				}
				if _, ok := hs["traceparent"]; ok {
					t.Errorf("message %d: header traceparent sent besides ce_traceparent", env.ID)
				}
			}
		})
	}
}

func TestCloudEventsConfigValidated(t *testing.T) {
	t.Parallel()
	for name, ce := range map[string]kafka.CloudEvents{
		"no source":    {},
		"blank source": {Source: "  "},
		"bad source":   {Source: "/a\nb"},
		"not a uri":    {Source: "%zz"},
		"content type": {Source: "/s", DataContentType: "not a media type"},
	} {
		_, err := kafka.New(kafka.Config{Brokers: []string{"127.0.0.1:1"}, Topic: "t", CloudEvents: &ce})
		if !errors.Is(err, kafka.ErrNotCloudEvent) || !strings.Contains(err.Error(), "Config.CloudEvents") {
			t.Errorf("%s: New: %v, want an error naming Config.CloudEvents and matching ErrNotCloudEvent", name, err)
		}
	}
}
