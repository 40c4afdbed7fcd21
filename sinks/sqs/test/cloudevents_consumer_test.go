package sqs_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
	outboxsqs "github.com/outboxer-go/outboxer/sinks/sqs"
)

// TestConsumerKeysCloudEvents: the consumer helper takes CloudEvents that another
// producer sent (binary mode ce_ attributes, or the structured JSON event) and keys them
// on their id, so an event received twice runs the handler once; two events with the
// same non-UUID id from different sources are two events.
func TestConsumerKeysCloudEvents(t *testing.T) {
	needEmulator(t)
	t.Parallel()
	db := dbtest.SQLite(t)
	in := dbtest.ConsumerInbox(t, db)
	queue := newQueue(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	str := func(v string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	binary := func(source, id string) *sqs.SendMessageInput {
		return &sqs.SendMessageInput{QueueUrl: &queue, MessageBody: aws.String(`{"n":1}`), MessageAttributes: map[string]types.MessageAttributeValue{
			"ce_specversion": str("1.0"), "ce_id": str(id), "ce_source": str(source), "ce_type": str("t"), "content-type": str("application/json")}}
	}
	structured := func(source, id string) *sqs.SendMessageInput {
		ev := event.New()
		ev.SetID(id)
		ev.SetSource(source)
		ev.SetType("t")
		b, err := format.JSON.Marshal(&ev)
		if err != nil {
			t.Fatal(err)
		}
		return &sqs.SendMessageInput{QueueUrl: &queue, MessageBody: aws.String(string(b)), MessageAttributes: map[string]types.MessageAttributeValue{
			"content-type": str(format.JSON.MediaType())}}
	}
	const uuid = "0b9f5a4e-3c1d-4e8a-9f00-6d7c5b4a3e21"
	sends := []*sqs.SendMessageInput{
		binary("/a", "1"), binary("/a", "1"), binary("/b", "1"),
		structured("/c", uuid), structured("/c", uuid), binary("/e", uuid),
	}
	for _, in := range sends {
		if _, err := newClient(endpoint).SendMessage(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	ran := 0
	c, err := outboxsqs.NewConsumer(outboxsqs.ConsumerConfig{Client: newClient(endpoint), QueueURL: queue, Inbox: in, Name: "billing",
		OnForeign: inbox.StopOnForeign,
		Handler: func(ctx context.Context, tx *sql.Tx, m types.Message, o inbox.Outcome) error {
			ran++
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	outcomes := map[inbox.Outcome]int{}
	for _, m := range receiveAll(t, ctx, queue, len(sends)) {
		o, err := c.HandleMessage(ctx, m)
		if err != nil {
			t.Errorf("message %s: %v", aws.ToString(m.Body), err)
		}
		outcomes[o]++
	}
	if ran != 3 || outcomes[inbox.Claimed] != 3 || outcomes[inbox.Duplicate] != 3 {
		t.Errorf("handler ran %d times, outcomes %v; want 3 events claimed and 3 duplicates", ran, outcomes)
	}
}
