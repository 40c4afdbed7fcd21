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

// A relay writing to one topic. Here the cluster runs in process; in production Brokers
// name your Kafka brokers, and the relay goes into core.OutboxConfig.Relay.
func Example() {
	cluster, err := kfake.NewCluster(kfake.SeedTopics(1, "orders"))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()

	relay, err := kafka.New(kafka.Config{Brokers: cluster.ListenAddrs(), Topic: "orders"})
	if err != nil {
		panic(err)
	}
	defer relay.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = relay.Deliver(ctx, []core.Envelope{
		{ID: 1, Outbox: "orders", Type: "orders.Created", GroupKey: "order:42", Payload: []byte(`{"id":42}`)},
		{ID: 2, Outbox: "orders", Type: "orders.Paid", GroupKey: "order:42", Payload: []byte(`{"id":42}`),
			Headers: map[string]string{"trace-id": "abc"}},
	})
	fmt.Println("delivered:", err == nil)

	// Read the records back, as a consumer would.
	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		panic(err)
	}
	defer consumer.Close()
	for seen := 0; seen < 2; {
		consumer.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			seen++
			fmt.Printf("key=%s value=%s", r.Key, r.Value)
			for _, h := range r.Headers {
				fmt.Printf(" %s=%s", h.Key, h.Value)
			}
			fmt.Println()
		})
	}
	// Output:
	// delivered: true
	// key=order:42 value={"id":42} outboxer-id=1 outboxer-type=orders.Created outboxer-outbox=orders outboxer-key=8b5cdb5e-b309-52f7-aa89-d2ecb6a9dc1a
	// key=order:42 value={"id":42} trace-id=abc outboxer-id=2 outboxer-type=orders.Paid outboxer-outbox=orders outboxer-key=3a495ad0-55d6-5e5e-b03d-725b9183c31a
}
