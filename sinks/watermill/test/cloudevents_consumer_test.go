package watermillsink_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
	watermillsink "github.com/outboxer-go/outboxer/sinks/watermill"
)

// TestMiddlewareKeysCloudEvents: the inbox middleware takes CloudEvents that another
// producer published through RabbitMQ (binary mode ce_ or AMQP-binding cloudEvents:
// headers, or the structured JSON event) and keys them on their id, so an event
// received twice runs the handler once; two events with the same non-UUID id from
// different sources are two events.
func TestMiddlewareKeysCloudEvents(t *testing.T) {
	t.Parallel()
	q := newRabbitQueue(t)
	db := dbtest.SQLite(t)
	in := dbtest.ConsumerInbox(t, db)
	binary := func(prefix, source, id string) *message.Message {
		m := message.NewMessage(watermill.NewUUID(), []byte(`{"n":1}`)) // a new UUID on every publish
		m.Metadata.Set(prefix+"specversion", "1.0")
		m.Metadata.Set(prefix+"id", id)
		m.Metadata.Set(prefix+"source", source)
		m.Metadata.Set(prefix+"type", "t")
		return m
	}
	structured := func(source, id string) *message.Message {
		ev := event.New()
		ev.SetID(id)
		ev.SetSource(source)
		ev.SetType("t")
		b, err := format.JSON.Marshal(&ev)
		if err != nil {
			t.Fatal(err)
		}
		m := message.NewMessage(watermill.NewUUID(), b)
		m.Metadata.Set("content-type", format.JSON.MediaType())
		return m
	}
	const uuid1, uuid2 = "0b9f5a4e-3c1d-4e8a-9f00-6d7c5b4a3e21", "1c8e4b3d-2b0c-4d79-8eff-5c6b4a392d10"
	msgs := []*message.Message{
		binary("ce_", "/a", "1"), binary("ce_", "/a", "1"), binary("ce_", "/b", "1"),
		binary("cloudEvents:", "/c", uuid1), binary("cloudEvents:", "/c", uuid1),
		structured("/d", uuid2), structured("/d", uuid2),
	}
	got := q.consume(t, len(msgs), 20*time.Second)
	if err := q.pub.Publish(q.name, msgs...); err != nil {
		t.Fatal(err)
	}
	received := <-got
	if len(received) != len(msgs) {
		t.Fatalf("received %d messages, want %d", len(received), len(msgs))
	}
	ran := 0
	h := watermillsink.Middleware(in, "billing", watermillsink.OnForeign(inbox.StopOnForeign))(func(*message.Message) ([]*message.Message, error) { ran++; return nil, nil })
	for _, m := range received {
		m.SetContext(t.Context()) // the subscription's context ended with consume
		if _, err := h(m); err != nil {
			t.Errorf("message %s: %v", m.UUID, err)
		}
	}
	if ran != 4 {
		t.Errorf("the handler ran %d times, want once for each of the 4 events", ran)
	}
}
