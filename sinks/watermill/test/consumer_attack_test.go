package watermillsink_test

// Attacks on the Watermill middleware with hostile and malformed messages.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
	watermillsink "github.com/outboxer-go/outboxer/sinks/watermill"
)

// TestAttackForwardedKeyHeader: a service that forwards what it consumed copies the
// incoming message's headers into the envelopes it publishes, outboxer-key (the
// upstream message's key) included. Two different messages published through the sink
// with that header must keep keys of their own (their rows'), or the consumer's inbox
// takes the second for a duplicate of the first and its effect is lost.
func TestAttackForwardedKeyHeader(t *testing.T) {
	db := dbtest.SQLite(t)
	in := dbtest.ConsumerInbox(t, db)
	pubsub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 16}, watermill.NopLogger{})
	defer pubsub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msgs, err := pubsub.Subscribe(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	sink, err := watermillsink.New(pubsub, watermillsink.Options{Topic: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	forwarded := map[string]string{core.HeaderKey: core.MessageKey("upstream", core.DefaultTable, 1), "trace": "t-1"}
	batch := []core.Envelope{
		{ID: 7, Outbox: "orders", Type: "order.placed", Payload: []byte(`{}`), Headers: forwarded},
		{ID: 8, Outbox: "orders", Type: "order.placed", Payload: []byte(`{}`), Headers: forwarded},
	}
	if err := sink.Deliver(ctx, batch); err != nil {
		t.Fatal(err)
	}
	ran := map[string]int{}
	h := watermillsink.Middleware(in, "billing")(func(msg *message.Message) ([]*message.Message, error) {
		ran[msg.Metadata.Get(watermillsink.MetadataID)]++
		return nil, nil
	})
	for range batch {
		var msg *message.Message
		select {
		case msg = <-msgs:
		case <-ctx.Done():
			t.Fatal("a message did not arrive")
		}
		id := msg.Metadata.Get(watermillsink.MetadataID)
		m, err := watermillsink.MessageOf(msg)
		if err != nil {
			t.Fatal(err)
		}
		if m.Key != msg.UUID {
			t.Errorf("message %s: key %q, want its UUID %q (the row's key)", id, m.Key, msg.UUID)
		}
		if _, err := h(msg); err != nil {
			t.Errorf("message %s: %v", id, err)
		}
		msg.Ack()
	}
	if ran["7"] != 1 || ran["8"] != 1 {
		t.Errorf("handler runs %v, want one for each of 7 and 8", ran)
	}
}

// TestAttackMalformedMessages: messages the sink did not publish. Without a key or an
// ID the middleware (with inbox.StopOnForeign) refuses them (ErrNoKey) without running
// the handler; with a key the inbox refuses (too long, invalid UTF-8) it fails with
// ErrInvalidMessage; a garbage ID turns the stale check off for the message, which is
// handled by its key.
func TestAttackMalformedMessages(t *testing.T) {
	db := dbtest.SQLite(t)
	in, err := inbox.New(inbox.Config{DB: db.DB, Dialect: db.Dialect, StaleCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	ran := 0
	h := watermillsink.Middleware(in, "billing", watermillsink.OnForeign(inbox.StopOnForeign))(func(*message.Message) ([]*message.Message, error) { ran++; return nil, nil })
	msg := func(uuid string, md map[string]string) *message.Message {
		m := message.NewMessage(uuid, []byte(`{}`))
		for k, v := range md {
			m.Metadata.Set(k, v)
		}
		return m
	}
	for name, tc := range map[string]struct {
		msg  *message.Message
		want error
	}{
		"no key, no id":        {msg("u1", nil), inbox.ErrNoKey},
		"garbage id, no key":   {msg("u2", map[string]string{watermillsink.MetadataID: "7x"}), inbox.ErrNoKey},
		"id, empty uuid":       {msg("", map[string]string{watermillsink.MetadataID: "7"}), inbox.ErrNoKey},
		"long key":             {msg("u3", map[string]string{core.HeaderKey: strings.Repeat("k", 300)}), inbox.ErrInvalidMessage},
		"invalid UTF-8 key":    {msg("u4", map[string]string{core.HeaderKey: "k\xff"}), inbox.ErrInvalidMessage},
		"long uuid with an id": {msg(strings.Repeat("u", 300), map[string]string{watermillsink.MetadataID: "7"}), inbox.ErrInvalidMessage},
	} {
		if _, err := h(tc.msg); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	if ran != 0 {
		t.Errorf("the handler ran %d times for refused messages", ran)
	}
	// A garbage ID next to a key: handled once by its key, not checked for staleness.
	for i := range 2 {
		m := msg("u5", map[string]string{core.HeaderKey: "k5", watermillsink.MetadataID: "-3", watermillsink.MetadataGroupKey: "g"})
		if _, err := h(m); err != nil {
			t.Fatalf("delivery %d: %v", i+1, err)
		}
	}
	if ran != 1 {
		t.Errorf("the handler ran %d times for one message delivered twice, want 1", ran)
	}
}
