package kafka_test

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/sinks/kafka"
)

// With Config.CloudEvents, every record is a CloudEvent in the Kafka binding's binary
// content mode: the payload stays the value and the attributes are ce_ headers, which
// any CloudEvents SDK's Kafka binding reads. The id is the message key, the same on
// every delivery of the row. (Set Structured for the JSON event as the value.)
func Example_cloudEvents() {
	cluster, err := kfake.NewCluster(kfake.SeedTopics(1, "orders"))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()

	relay, err := kafka.New(kafka.Config{Brokers: cluster.ListenAddrs(), Topic: "orders",
		CloudEvents: &kafka.CloudEvents{Source: "/shop/orders"}})
	if err != nil {
		panic(err)
	}
	defer relay.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = relay.Deliver(ctx, []core.Envelope{{ID: 1, Outbox: "orders", Type: "orders.Created", GroupKey: "order:42",
		CreatedAt: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC), Payload: []byte(`{"id":42}`),
		Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}})
	fmt.Println("delivered:", err == nil)

	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		panic(err)
	}
	defer consumer.Close()
	for seen := false; !seen; {
		consumer.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			seen = true
			fmt.Printf("key=%s value=%s\n", r.Key, r.Value)
			for _, h := range r.Headers {
				fmt.Printf("%s: %s\n", h.Key, h.Value)
			}
		})
	}
	// Output:
	// delivered: true
	// key=order:42 value={"id":42}
	// ce_specversion: 1.0
	// ce_id: 8b5cdb5e-b309-52f7-aa89-d2ecb6a9dc1a
	// ce_source: /shop/orders
	// ce_type: orders.Created
	// ce_subject: order:42
	// ce_time: 2026-05-01T12:00:00Z
	// ce_partitionkey: order:42
	// ce_traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01
	// content-type: application/json
	// outboxer-id: 1
	// outboxer-type: orders.Created
	// outboxer-outbox: orders
	// outboxer-key: 8b5cdb5e-b309-52f7-aa89-d2ecb6a9dc1a
}
