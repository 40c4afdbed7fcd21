package kafka_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
	"github.com/outboxer-go/outboxer/sinks/kafka"
)

// TestConsumerKeysCloudEvents: the consumer helper takes CloudEvents that another
// producer wrote (binary mode headers, or the structured JSON event) and keys them on
// their id, so an event delivered twice runs the handler once; two events with the same
// non-UUID id from different sources are two events. An event of the relay's own keeps
// the message key it always had.
func TestConsumerKeysCloudEvents(t *testing.T) {
	t.Parallel()
	db := dbtest.SQLite(t)
	in := dbtest.ConsumerInbox(t, db)
	kc, err := kfake.NewCluster(kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	binary := func(source, id string) *kgo.Record {
		return &kgo.Record{Topic: "orders", Value: []byte(`{"n":1}`), Headers: []kgo.RecordHeader{
			{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte(id)},
			{Key: "ce_source", Value: []byte(source)}, {Key: "ce_type", Value: []byte("t")},
			{Key: "content-type", Value: []byte("application/json")},
		}}
	}
	structured := func(source, id string) *kgo.Record {
		ev := event.New()
		ev.SetID(id)
		ev.SetSource(source)
		ev.SetType("t")
		if err := ev.SetData("application/json", map[string]int{"n": 1}); err != nil {
			t.Fatal(err)
		}
		b, err := format.JSON.Marshal(&ev)
		if err != nil {
			t.Fatal(err)
		}
		return &kgo.Record{Topic: "orders", Value: b, Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte(format.JSON.MediaType())}}}
	}
	const uuid = "0b9f5a4e-3c1d-4e8a-9f00-6d7c5b4a3e21"
	recs := []*kgo.Record{
		binary("/a", "1"), binary("/a", "1"), binary("/b", "1"),
		structured("/c", uuid), structured("/c", uuid), structured("/d", "1"),
		binary("/e", uuid), // the same UUID as /c's event: one event
	}
	producer, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	if err := producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	relay, err := kafka.New(kafka.Config{Brokers: kc.ListenAddrs(), Topic: "orders", CloudEvents: &kafka.CloudEvents{Source: "/shop"}})
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	if err := relay.Deliver(ctx, []core.Envelope{{ID: 5, Outbox: "orders", Type: "t", GroupKey: "g", Payload: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}

	cl := groupClient(t, kc.ListenAddrs())
	defer cl.Close()
	ran := 0
	c, err := kafka.NewConsumer(kafka.ConsumerConfig{Client: cl, Inbox: in, Name: "billing", OnForeign: inbox.StopOnForeign,
		Handler: func(ctx context.Context, tx *sql.Tx, rec *kgo.Record, o inbox.Outcome) error {
			ran++
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	want := []inbox.Outcome{inbox.Claimed, inbox.Duplicate, inbox.Claimed, inbox.Claimed, inbox.Duplicate, inbox.Claimed, inbox.Duplicate, inbox.Claimed}
	for i, rec := range fetch(t, ctx, cl, len(want)) {
		o, err := c.HandleRecord(ctx, rec)
		if err != nil || o != want[i] {
			t.Errorf("record %d: %v, %v; want %v", rec.Offset, o, err, want[i])
		}
		if i == len(want)-1 {
			m, err := kafka.MessageOf(rec)
			if key := core.MessageKey("", core.DefaultTable, 5); err != nil || m.Key != key || m.Seq != 5 {
				t.Errorf("the relay's event: %+v, %v; want key %s and seq 5", m, err, key)
			}
		}
	}
	if ran != 5 {
		t.Errorf("handler ran %d times, want 5", ran)
	}
}
