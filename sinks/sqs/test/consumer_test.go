package sqs_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
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

func messageID(m types.Message) int64 {
	id, _ := strconv.ParseInt(aws.ToString(m.MessageAttributes[outboxsqs.AttrID].StringValue), 10, 64)
	return id
}

// queueEmpty reports whether the queue holds no message, visible or in flight.
func queueEmpty(t *testing.T, ctx context.Context, queue string) bool {
	t.Helper()
	out, err := newClient(endpoint).GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &queue,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		t.Fatalf("GetQueueAttributes: %v", err)
	}
	return out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)] == "0" &&
		out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)] == "0"
}

// TestConsumerRunsEachMessageOnce: a message the relay sent twice, and a message SQS
// delivers again after its visibility timeout because the consumer committed and then
// failed to delete it, run the handler once; a handler error rolls back its write and
// leaves the message in the queue, and its redelivery runs it. Every message carries
// the key of its row for the relay's Source.
func TestConsumerRunsEachMessageOnce(t *testing.T) {
	needEmulator(t)
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		in := dbtest.ConsumerInbox(t, db)
		queue := newQueueWith(t, false, map[string]string{"VisibilityTimeout": "1"})
		relay := newRelay(t, outboxsqs.Config{Client: newClient(endpoint), QueueURL: queue, Ordering: core.OrderNone, Source: "orders-db"})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		send := func(ids ...int64) {
			var batch []core.Envelope
			for _, id := range ids {
				batch = append(batch, core.Envelope{ID: id, Outbox: "orders", Type: "order.placed", Payload: []byte(`{}`)})
			}
			if err := relay.Deliver(ctx, batch); err != nil {
				t.Fatalf("Deliver: %v", err)
			}
		}
		send(1, 2, 3)
		send(2) // the relay sends a message again

		var mu sync.Mutex
		calls := map[int64]int{}
		failThree := true
		boom := errors.New("boom")
		handler := func(ctx context.Context, tx *sql.Tx, m types.Message, o inbox.Outcome) error {
			id := messageID(m)
			if key, _ := outboxsqs.MessageOf(m); key.Key != core.MessageKey("orders-db", core.DefaultTable, id) {
				t.Errorf("message %d carries key %q, want core.MessageKey(Source, table, id)", id, key.Key)
			}
			mu.Lock()
			calls[id]++
			fail := id == 3 && failThree
			mu.Unlock()
			if _, err := tx.ExecContext(ctx, fmt.Sprintf(`INSERT INTO effects (id) VALUES (%d)`, id)); err != nil {
				return err
			}
			if fail {
				return boom
			}
			return nil
		}
		newConsumer := func(client *sqs.Client) *outboxsqs.Consumer {
			c, err := outboxsqs.NewConsumer(outboxsqs.ConsumerConfig{Client: client, QueueURL: queue, Inbox: in, Name: "billing", Handler: handler, WaitTime: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		good := newConsumer(newClient(endpoint))
		noDelete := newConsumer(newClient("http://127.0.0.1:1")) // commits, then cannot delete

		var got []types.Message
		for len(got) < 4 && ctx.Err() == nil {
			out, err := newClient(endpoint).ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &queue, MaxNumberOfMessages: 10,
				WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"}, VisibilityTimeout: 3})
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, out.Messages...)
		}
		for _, m := range got {
			switch id := messageID(m); id {
			case 1:
				if _, err := noDelete.HandleMessage(ctx, m); err == nil {
					t.Error("message 1: the delete through a dead endpoint succeeded")
				}
			case 3:
				if _, err := good.HandleMessage(ctx, m); !errors.Is(err, boom) {
					t.Errorf("message 3: %v, want the handler's error", err)
				}
			default:
				if _, err := good.HandleMessage(ctx, m); err != nil {
					t.Errorf("message %d: %v", id, err)
				}
			}
		}
		if e := dbtest.Effects(t, db.DB); e[1] != 1 || e[2] != 1 || e[3] != 0 {
			t.Fatalf("effects %v, want 1 and 2 once, 3 rolled back", e)
		}

		// Messages 1 and 3 come back after their visibility timeout.
		mu.Lock()
		failThree = false
		mu.Unlock()
		runCtx, stop := context.WithCancel(ctx)
		ran := make(chan error, 1)
		go func() { ran <- good.Run(runCtx) }()
		for ctx.Err() == nil && (dbtest.Effects(t, db.DB)[3] == 0 || !queueEmpty(t, ctx, queue)) {
			time.Sleep(100 * time.Millisecond)
		}
		stop()
		if err := <-ran; err != nil {
			t.Fatalf("Run: %v", err)
		}
		if ctx.Err() != nil {
			t.Fatal("the queue did not empty")
		}
		e := dbtest.Effects(t, db.DB)
		for id := int64(1); id <= 3; id++ {
			if e[id] != 1 {
				t.Errorf("effect of message %d committed %d times, want 1 (%v)", id, e[id], e)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if calls[1] != 1 || calls[2] != 1 || calls[3] != 2 {
			t.Errorf("handler calls %v, want 1:1 2:1 3:2", calls)
		}
	})
}

func TestNewConsumerValidates(t *testing.T) {
	db := dbtest.SQLite(t)
	in := dbtest.ConsumerInbox(t, db)
	h := func(context.Context, *sql.Tx, types.Message, inbox.Outcome) error { return nil }
	client := newClient("http://127.0.0.1:1")
	for _, cfg := range []outboxsqs.ConsumerConfig{
		{QueueURL: "http://q", Inbox: in, Name: "b", Handler: h},
		{Client: client, Inbox: in, Name: "b", Handler: h},
		{Client: client, QueueURL: "http://q", Name: "b", Handler: h},
		{Client: client, QueueURL: "http://q", Inbox: in, Handler: h},
		{Client: client, QueueURL: "http://q", Inbox: in, Name: "b"},
		{Client: client, QueueURL: "http://q", Inbox: in, Name: "b", Handler: h, WaitTime: time.Minute},
	} {
		if _, err := outboxsqs.NewConsumer(cfg); err == nil {
			t.Errorf("NewConsumer(%+v) accepted it", cfg)
		}
	}
	// The default window (7 days) covers 30 s × 5 receives, not 12 h × 20.
	if err := outboxsqs.CheckRedelivery(in, 30*time.Second, 5); err != nil {
		t.Errorf("CheckRedelivery(30s, 5): %v", err)
	}
	if err := outboxsqs.CheckRedelivery(in, 12*time.Hour, 20); !errors.Is(err, inbox.ErrWindowTooShort) {
		t.Errorf("CheckRedelivery(12h, 20) = %v, want inbox.ErrWindowTooShort", err)
	}
	if _, err := outboxsqs.MessageOf(types.Message{}); !errors.Is(err, inbox.ErrNoKey) {
		t.Errorf("MessageOf(message without attributes) = %v, want inbox.ErrNoKey", err)
	}
}
