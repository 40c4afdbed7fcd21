package watermillsink_test

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/outboxer-go/outboxer/core"
	watermillsink "github.com/outboxer-go/outboxer/sinks/watermill"
)

// The sink publishes each envelope as a Watermill message with a stable UUID, the payload
// as is and the outbox fields in the metadata. Here the publisher is Watermill's
// in-process GoChannel; in production it is any message.Publisher (AMQP, NATS, Kafka…).
func Example() {
	// BlockPublishUntilSubscriberAck makes GoChannel keep the publish order.
	pubsub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	defer pubsub.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	messages, err := pubsub.Subscribe(ctx, "orders")
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 2 {
			msg := <-messages
			fmt.Println(msg.UUID, string(msg.Payload), msg.Metadata.Get(watermillsink.MetadataType),
				msg.Metadata.Get(watermillsink.MetadataGroupKey), msg.Metadata.Get("tenant"))
			msg.Ack() // Deliver's Publish returns only now
		}
	}()

	sink, err := watermillsink.New(pubsub, watermillsink.Options{Topic: "orders"})
	if err != nil {
		panic(err)
	}
	// In an application the engine calls Deliver (core.OutboxConfig{Relay: sink}).
	err = sink.Deliver(ctx, []core.Envelope{
		{ID: 1, Outbox: "orders", Type: "order.placed", GroupKey: "order:42", Payload: []byte(`{"total":990}`), Headers: map[string]string{"tenant": "acme"}},
		{ID: 2, Outbox: "orders", Type: "order.paid", GroupKey: "order:42", Payload: []byte(`{"paid":true}`), Headers: map[string]string{"tenant": "acme"}},
	})
	fmt.Println("delivered:", err == nil)
	<-done
	// Output:
	// 8b5cdb5e-b309-52f7-aa89-d2ecb6a9dc1a {"total":990} order.placed order:42 acme
	// 3a495ad0-55d6-5e5e-b03d-725b9183c31a {"paid":true} order.paid order:42 acme
	// delivered: true
}

// MessageUUID gives a consumer the UUID a row is published with, for example to check
// against the IDs it has already processed.
func ExampleMessageUUID() {
	fmt.Println(watermillsink.MessageUUID("outboxer_messages", 42))
	fmt.Println(watermillsink.MessageUUID("outboxer_messages", 42) == watermillsink.MessageUUID("outboxer_messages", 42))
	// Output:
	// 14eed6bb-65bb-50de-9bca-bd02418bed68
	// true
}
