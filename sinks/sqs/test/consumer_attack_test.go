package sqs_test

// Attacks on the SQS consumer helper with malformed and hostile messages.

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
	outboxsqs "github.com/outboxer-go/outboxer/sinks/sqs"
)

// receiveAll receives n messages from queue, with every attribute.
func receiveAll(t *testing.T, ctx context.Context, queue string, n int) []types.Message {
	t.Helper()
	var got []types.Message
	for len(got) < n && ctx.Err() == nil {
		out, err := newClient(endpoint).ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &queue, MaxNumberOfMessages: 10,
			WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"}, VisibilityTimeout: 30})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, out.Messages...)
	}
	if len(got) != n {
		t.Fatalf("received %d messages, want %d", len(got), n)
	}
	return got
}

// TestAttackHeadersCannotSpoofKey: envelopes whose headers use the names of the sink's
// own attributes (a consumer that forwards a message copies its headers, outboxer-key
// included) still carry their own key, ID and encoding: two different messages
// forwarded from one are not each other's duplicates, and the body is not decoded as
// base64 because a header said so.
func TestAttackHeadersCannotSpoofKey(t *testing.T) {
	needEmulator(t)
	upstream := core.MessageKey("upstream", core.DefaultTable, 1)
	for name, forwarded := range map[string]map[string]string{
		"the key":         {outboxsqs.AttrKey: upstream},
		"key, id, base64": {outboxsqs.AttrKey: upstream, outboxsqs.AttrID: "999", outboxsqs.AttrEncoding: "base64", "trace": "t-1"},
		"all of them": {outboxsqs.AttrKey: upstream, outboxsqs.AttrID: "999", outboxsqs.AttrEncoding: "base64",
			outboxsqs.AttrGroupKey: "spoofed", outboxsqs.AttrOutbox: "spoofed", outboxsqs.AttrType: "spoofed", "trace": "t-1"},
	} {
		t.Run(name, func(t *testing.T) { spoofKey(t, forwarded) })
	}
}

func spoofKey(t *testing.T, forwarded map[string]string) {
	db := dbtest.SQLite(t)
	in := dbtest.ConsumerInbox(t, db)
	queue := newQueue(t, false)
	relay := newRelay(t, outboxsqs.Config{Client: newClient(endpoint), QueueURL: queue, Ordering: core.OrderNone})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var batch []core.Envelope
	for _, id := range []int64{7, 8} {
		batch = append(batch, core.Envelope{ID: id, Outbox: "orders", Type: "order.placed", GroupKey: "order:1", Payload: []byte(`{"n":1}`), Headers: forwarded})
	}
	if err := relay.Deliver(ctx, batch); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	got := map[int64]int{}
	c, err := outboxsqs.NewConsumer(outboxsqs.ConsumerConfig{Client: newClient(endpoint), QueueURL: queue, Inbox: in, Name: "billing",
		Handler: func(ctx context.Context, tx *sql.Tx, m types.Message, o inbox.Outcome) error {
			got[messageID(m)]++
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range receiveAll(t, ctx, queue, 2) {
		msg, err := outboxsqs.MessageOf(m)
		if err != nil {
			t.Fatal(err)
		}
		id := messageID(m)
		if id != 7 && id != 8 {
			t.Errorf("message carries %s %d, want 7 or 8", outboxsqs.AttrID, id)
		}
		if want := core.MessageKey("", core.DefaultTable, id); msg.Key != want {
			t.Errorf("message %d: key %q, want the row's %q", id, msg.Key, want)
		}
		if want := inbox.GroupOf("orders", "order:1"); msg.Group != want || msg.Seq != id {
			t.Errorf("message %d: group %q seq %d, want %q %d", id, msg.Group, msg.Seq, want, id)
		}
		// The envelope arrives whole: payload, type, and every header, the forwarded
		// outboxer-* ones included.
		rec, err := decode(m)
		if err != nil {
			t.Errorf("message %d: %v", id, err)
		} else if string(rec.Payload) != `{"n":1}` || rec.Type != "order.placed" || rec.Outbox != "orders" || rec.GroupKey != "order:1" || len(rec.Headers) != len(forwarded) {
			t.Errorf("message %d: %+v, want the envelope's", id, rec)
		} else {
			for k, v := range forwarded {
				if rec.Headers[k] != v {
					t.Errorf("message %d: header %s = %q, want %q", id, k, rec.Headers[k], v)
				}
			}
		}
		if o, err := c.HandleMessage(ctx, m); err != nil || o != inbox.Claimed {
			t.Errorf("message %d: %v %v, want claimed", id, o, err)
		}
	}
	if got[7] != 1 || got[8] != 1 {
		t.Errorf("handler runs %v, want one for each of 7 and 8", got)
	}
}

// TestAttackMalformedMessages: messages not sent by the relay, sent straight to the
// queue: without the key, with a key the inbox refuses, with a garbage ID. The helper
// (with the OnForeign policy inbox.StopOnForeign) refuses the first two without running the handler and leaves them in the queue (SQS
// delivers them again, and its redrive policy dead-letters them); a garbage ID only
// turns the stale check off for that message.
func TestAttackMalformedMessages(t *testing.T) {
	needEmulator(t)
	db := dbtest.SQLite(t)
	in, err := inbox.New(inbox.Config{DB: db.DB, Dialect: db.Dialect, StaleCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	queue := newQueue(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	str := func(v string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	cases := map[string]map[string]types.MessageAttributeValue{
		"no attributes": nil,
		"empty key":     {outboxsqs.AttrKey: str(" ")},
		"long key":      {outboxsqs.AttrKey: str(strings.Repeat("k", 300))},
		"garbage id":    {outboxsqs.AttrKey: str("k-garbage-id"), outboxsqs.AttrID: str("12x"), outboxsqs.AttrOutbox: str("orders"), outboxsqs.AttrGroupKey: str("g")},
		"number key":    {outboxsqs.AttrKey: {DataType: aws.String("Number"), StringValue: aws.String("42")}},
	}
	for name, attrs := range cases {
		if _, err := newClient(endpoint).SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &queue, MessageBody: aws.String(name), MessageAttributes: attrs}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	ran := map[string]int{}
	c, err := outboxsqs.NewConsumer(outboxsqs.ConsumerConfig{Client: newClient(endpoint), QueueURL: queue, Inbox: in, Name: "billing",
		OnForeign: inbox.StopOnForeign, // refuse the message without a key (the default skips it)
		Handler: func(ctx context.Context, tx *sql.Tx, m types.Message, o inbox.Outcome) error {
			ran[aws.ToString(m.Body)]++
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range receiveAll(t, ctx, queue, len(cases)) {
		name := aws.ToString(m.Body)
		o, err := c.HandleMessage(ctx, m)
		switch name {
		case "no attributes":
			if !errors.Is(err, inbox.ErrNoKey) {
				t.Errorf("%s: %v %v, want ErrNoKey", name, o, err)
			}
		case "long key":
			if !errors.Is(err, inbox.ErrInvalidMessage) {
				t.Errorf("%s: %v %v, want ErrInvalidMessage", name, o, err)
			}
		case "empty key", "garbage id", "number key":
			// A blank key is a key (byte for byte); a garbage ID is no position.
			if err != nil || o != inbox.Claimed {
				t.Errorf("%s: %v %v, want claimed", name, o, err)
			}
		}
	}
	if ran["no attributes"] != 0 || ran["long key"] != 0 {
		t.Errorf("the handler ran for refused messages: %v", ran)
	}
	// The refused ones are still in the queue (in flight), the others deleted.
	out, err := newClient(endpoint).GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &queue,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		t.Fatal(err)
	}
	if n := out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)]; n != "2" {
		t.Errorf("%s messages left in flight, want the 2 refused", n)
	}
}
