package riversink_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/outboxer-go/outboxer/core"
	riversink "github.com/outboxer-go/outboxer/sinks/river"
)

// TestCloudEventInTheJobMetadata: with Options.CloudEvents, every job's metadata holds
// the message's CloudEvent, which the CloudEvents SDK's JSON format reads and validates;
// a message that cannot have one fails permanently and alone.
func TestCloudEventInTheJobMetadata(t *testing.T) {
	t.Parallel()
	db := newRiverDB(t)
	client, err := river.NewClient(riverpgxv5.New(db.pool), &river.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := riversink.New(client, riversink.Options{Table: "orders_outbox", Source: "db1",
		CloudEvents: &riversink.CloudEvents{Source: "/shop/orders"}})
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 3, 4, 5, 6, 7, 891011000, time.UTC)
	good := []core.Envelope{
		{ID: 1, Outbox: "orders", Type: "order.created", GroupKey: "order-7", CreatedAt: created, Payload: []byte(`{"n":1}`),
			Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tenant": "\"q\" ü 😀 \\"}},
		{ID: 2, Outbox: "orders", Type: "order.paid", CreatedAt: created, Payload: []byte(`{}`)},
	}
	bad := []core.Envelope{
		{ID: 10, Outbox: "orders", Type: "t", Payload: []byte(`{}`), Headers: map[string]string{"X-Request-Id": "1"}},
		{ID: 11, Outbox: "orders", Type: "t", Payload: []byte(`{}`), Headers: map[string]string{"ok": "nul\x00"}},
		{ID: 12, Outbox: "orders", Type: "t", Payload: []byte(`{}`), Headers: map[string]string{"source": "spoofed"}},
	}
	err = sink.Deliver(context.Background(), append(append([]core.Envelope{}, bad...), good...))
	var pf *core.PartialFailure
	if !errors.As(err, &pf) || len(pf.Failed) != len(bad) {
		t.Fatalf("Deliver: %v, want the %d bad messages to fail", err, len(bad))
	}
	for _, env := range bad {
		if err := pf.Failed[env.ID]; !errors.Is(err, core.ErrPermanent) || !errors.Is(err, riversink.ErrNotCloudEvent) {
			t.Errorf("message %d: %v, want a permanent failure with ErrNotCloudEvent", env.ID, err)
		}
	}
	rows, err := db.Query(`SELECT (metadata->>'outboxer_id')::bigint, metadata->>'cloudevent' FROM river_job ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id int64
		var js string
		if err := rows.Scan(&id, &js); err != nil {
			t.Fatal(err)
		}
		env := good[n]
		n++
		var ev event.Event
		if err := format.JSON.Unmarshal([]byte(js), &ev); err != nil {
			t.Fatalf("job of message %d: %s: %v", id, js, err)
		}
		if err := ev.Validate(); err != nil {
			t.Fatalf("job of message %d: invalid CloudEvent %s: %v", id, js, err)
		}
		if id != env.ID || ev.ID() != core.MessageKey("db1", "orders_outbox", env.ID) || ev.Source() != "/shop/orders" ||
			ev.Type() != env.Type || ev.Subject() != env.GroupKey || !ev.Time().Equal(created) || len(ev.Data()) != 0 {
			t.Errorf("job of message %d: event %v", id, ev)
		}
		exts := ev.Extensions()
		if len(exts) != len(env.Headers) {
			t.Errorf("job of message %d: extensions %v, want %v", id, exts, env.Headers)
		}
		for k, v := range env.Headers {
			if exts[k] != v {
				t.Errorf("job of message %d: extension %s = %q, want %q", id, k, exts[k], v)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(good) {
		t.Fatalf("%d jobs, want %d", n, len(good))
	}
}

func TestCloudEventsOptionValidated(t *testing.T) {
	t.Parallel()
	client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for name, ce := range map[string]riversink.CloudEvents{
		"no source":    {},
		"bad source":   {Source: "/a\nb"},
		"content type": {Source: "/s", DataContentType: "not a media type"},
	} {
		_, err := riversink.New(client, riversink.Options{CloudEvents: &ce})
		if !errors.Is(err, riversink.ErrNotCloudEvent) || !strings.Contains(err.Error(), "Options.CloudEvents") {
			t.Errorf("%s: New: %v, want an error naming Options.CloudEvents and matching ErrNotCloudEvent", name, err)
		}
	}
}
