package core_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/outboxer-go/outboxer/core"
)

// describe prints what a relay's result means to the engine, message by message.
func describe(batch []core.Envelope, err error) {
	var pf *core.PartialFailure
	errors.As(err, &pf)
	for _, e := range batch {
		state := "delivered"
		if pf != nil {
			if ferr, ok := pf.Failed[e.ID]; ok {
				switch {
				case errors.Is(ferr, core.ErrHeldBack):
					state = "held back (no attempt counted)"
				case errors.Is(ferr, core.ErrPermanent):
					state = "dead: " + ferr.Error()
				default:
					state = "retried later: " + ferr.Error()
				}
			}
		}
		fmt.Printf("%d (group %q): %s\n", e.ID, e.GroupKey, state)
	}
}

func exampleBatch() []core.Envelope {
	return []core.Envelope{
		{ID: 1, Outbox: "orders", Type: "order.created", GroupKey: "order:1", Payload: []byte(`{"id":1}`)},
		{ID: 2, Outbox: "orders", Type: "order.created", GroupKey: "order:2", Payload: []byte(`{"id":2}`)},
		{ID: 3, Outbox: "orders", Type: "order.paid", GroupKey: "order:1", Payload: []byte(`{"id":1}`)},
		{ID: 4, Outbox: "orders", Type: "audit.note", Payload: []byte(`{}`)},
	}
}

// A relay written one message at a time: the first message of group order:1 fails, so
// the next message of that group is not even tried, while the others go on.
func ExamplePerMessage() {
	relay := core.PerMessage(core.OrderGroup, func(ctx context.Context, env core.Envelope) error {
		if env.ID == 1 {
			return errors.New("endpoint answered 503")
		}
		fmt.Println("sent", env.ID)
		return nil
	})
	batch := exampleBatch()
	describe(batch, relay.Deliver(context.Background(), batch))
	// Output:
	// sent 2
	// sent 4
	// 1 (group "order:1"): retried later: endpoint answered 503
	// 2 (group "order:2"): delivered
	// 3 (group "order:1"): held back (no attempt counted)
	// 4 (group ""): delivered
}

// Filter keeps audit notes from the broker: they count as delivered without being sent.
func ExampleFilter() {
	send := core.PerMessage(core.OrderGroup, func(ctx context.Context, env core.Envelope) error {
		fmt.Println("sent", env.ID, env.Type)
		return nil
	})
	relay := core.Filter(send, func(env core.Envelope) bool { return !strings.HasPrefix(env.Type, "audit.") })
	batch := exampleBatch()
	describe(batch, relay.Deliver(context.Background(), batch))
	// Output:
	// sent 1 order.created
	// sent 2 order.created
	// sent 3 order.paid
	// 1 (group "order:1"): delivered
	// 2 (group "order:2"): delivered
	// 3 (group "order:1"): delivered
	// 4 (group ""): delivered
}

// Map adds a header to every message; a message it cannot map fails, wrapped with
// Permanent here because trying again cannot help, and its group waits for the next batch.
func ExampleMap() {
	send := core.PerMessage(core.OrderGroup, func(ctx context.Context, env core.Envelope) error {
		fmt.Println("sent", env.ID, env.Headers)
		return nil
	})
	relay := core.Map(core.OrderGroup, send, func(ctx context.Context, env core.Envelope) (core.Envelope, error) {
		if env.ID == 2 {
			return env, core.Permanent(errors.New("no schema for this type"))
		}
		env.Headers = map[string]string{"content-type": "application/json"}
		return env, nil
	})
	batch := exampleBatch()
	describe(batch, relay.Deliver(context.Background(), batch))
	// Output:
	// sent 1 map[content-type:application/json]
	// sent 3 map[content-type:application/json]
	// sent 4 map[content-type:application/json]
	// 1 (group "order:1"): delivered
	// 2 (group "order:2"): dead: outboxer: map message 2: no schema for this type
	// 3 (group "order:1"): delivered
	// 4 (group ""): delivered
}

// FanOut sends every message to a broker and to a search index; a message counts as
// delivered once both have it. The index sees only what the broker took.
func ExampleFanOut() {
	var broker, index []int64
	toBroker := core.PerMessage(core.OrderGroup, func(ctx context.Context, env core.Envelope) error {
		if env.ID == 2 {
			return errors.New("broker busy")
		}
		broker = append(broker, env.ID)
		return nil
	})
	toIndex := core.PerMessage(core.OrderGroup, func(ctx context.Context, env core.Envelope) error {
		index = append(index, env.ID)
		return nil
	})
	relay := core.FanOut(core.OrderGroup, toBroker, toIndex)
	batch := exampleBatch()
	err := relay.Deliver(context.Background(), batch)
	fmt.Println("broker:", broker, "index:", index)
	var pf *core.PartialFailure
	if errors.As(err, &pf) {
		fmt.Println("to retry:", slices.Sorted(maps.Keys(pf.Failed)))
	}
	// Output:
	// broker: [1 3 4] index: [1 3 4]
	// to retry: [2]
}
