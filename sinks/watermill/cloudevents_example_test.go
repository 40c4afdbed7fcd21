package watermillsink_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/outboxer-go/outboxer/core"
	watermillsink "github.com/outboxer-go/outboxer/sinks/watermill"
)

// With Options.CloudEvents, every message is a CloudEvent: in the binary content mode
// the payload stays as is and the attributes are ce_ metadata, which Watermill's
// Pub/Subs carry as headers. The structured mode, here, makes the payload the JSON event.
func Example_cloudEvents() {
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
		msg := <-messages
		fmt.Println(msg.UUID)
		fmt.Println(string(msg.Payload))
		for _, k := range slices.Sorted(maps.Keys(msg.Metadata)) {
			fmt.Printf("%s: %s\n", k, msg.Metadata[k])
		}
		msg.Ack()
	}()

	sink, err := watermillsink.New(pubsub, watermillsink.Options{Topic: "orders",
		CloudEvents: &watermillsink.CloudEvents{Source: "/shop/orders", Structured: true}})
	if err != nil {
		panic(err)
	}
	err = sink.Deliver(ctx, []core.Envelope{{ID: 1, Outbox: "orders", Type: "order.placed", GroupKey: "order:42",
		CreatedAt: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC), Payload: []byte(`{"total":990}`),
		Headers: map[string]string{"tenant": "acme"}}})
	<-done
	fmt.Println("delivered:", err == nil)
	// Output:
	// 8b5cdb5e-b309-52f7-aa89-d2ecb6a9dc1a
	// {"specversion":"1.0","id":"8b5cdb5e-b309-52f7-aa89-d2ecb6a9dc1a","source":"/shop/orders","type":"order.placed","subject":"order:42","time":"2026-05-01T12:00:00Z","tenant":"acme","datacontenttype":"application/json","data":{"total":990}}
	// content-type: application/cloudevents+json
	// outboxer_group_key: order:42
	// outboxer_id: 1
	// outboxer_outbox: orders
	// outboxer_type: order.placed
	// delivered: true
}
