package watermillsink_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	watermillsink "github.com/outboxer-go/outboxer/sinks/watermill"
)

// TestEngineChargesOnlyTheFailedMessage runs the sink under the engine on PostgreSQL. One
// message is refused by the broker once and one is too large: the engine charges the
// refused one an attempt and marks the large one dead, while the messages the sink held
// back after each failure stay pending with no attempt and go out, in order, in the
// next batches of the same Drain. Only the refused message's group waits for its retry.
// It runs on GoChannel and on a real RabbitMQ queue read back by a subscriber.
func TestEngineChargesOnlyTheFailedMessage(t *testing.T) {
	t.Run("gochannel", func(t *testing.T) {
		pubsub := newGoChannel(t)
		ch := collect(t, pubsub, "orders")
		// Publish returns once the subscriber acked: what was published has arrived.
		engineChargesOnlyTheFailedMessage(t, pubsub, "orders", func(context.Context, int) ([]int64, error) {
			return idsOf(ch.got()), nil
		})
	})
	t.Run("rabbitmq", func(t *testing.T) {
		q := newRabbitQueue(t)
		r := newQueueReader(t, q)
		engineChargesOnlyTheFailedMessage(t, q.pub, q.name, func(ctx context.Context, n int) ([]int64, error) {
			got, err := r.read(ctx, n)
			ids := make([]int64, len(got))
			for i, m := range got {
				ids[i] = m.ID
			}
			return ids, err
		})
	})
}

// engineChargesOnlyTheFailedMessage relays through pub to topic; read waits until n
// messages arrived and returns the IDs of all that did, in arrival order.
func engineChargesOnlyTheFailedMessage(t *testing.T, dest message.Publisher, topic string, read func(ctx context.Context, n int) ([]int64, error)) {
	db := dbtest.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const refused = 6          // the 6th message published
	var refusedID atomic.Int64 // its ID, once published; 0 when the broker takes it
	pub := publisherFunc(func(topic string, msgs ...*message.Message) error {
		if slices.Contains(idsOf(msgs), refusedID.Load()) {
			return errors.New("broker unavailable (injected)")
		}
		return dest.Publish(topic, msgs...)
	})
	sink, err := watermillsink.New(pub, watermillsink.Options{Topic: topic, MaxPayloadBytes: 64})
	if err != nil {
		t.Fatal(err)
	}
	ob, err := core.New(core.Config{DB: db.DB, Manual: true, Logger: slog.New(slog.DiscardHandler),
		Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: sink, BatchSize: 8, MaxAttempts: 5,
			Backoff: core.Backoff{Func: func(int) time.Duration { return 0 }},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// 20 messages in groups g0..g3 (ID n in group (n-1) mod 4); 6 is in g1, 12 (too large) in g3.
	msgs := make([]core.Message, 20)
	for i := range msgs {
		data := fmt.Appendf(nil, `{"n":%d}`, i+1)
		if i+1 == 12 {
			data = fmt.Appendf(nil, `{"pad":%q}`, make([]byte, 64))
		}
		msgs[i] = core.Raw{To: "orders", Type: "order.placed", Key: fmt.Sprintf("g%d", i%4), Data: data}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	envs, err := ob.PublishAll(ctx, tx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	id := func(n int) int64 { return envs[n-1].ID }
	refusedID.Store(id(refused))
	group1 := []int64{id(6), id(10), id(14), id(18)}

	res, err := ob.Drain(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if want := (core.DrainResult{Delivered: 15, Failed: 1, Dead: 1}); res != want {
		t.Fatalf("first Drain = %+v, want %+v", res, want)
	}
	pending, err := ob.ListPending(ctx, "orders", 100)
	if err != nil {
		t.Fatal(err)
	}
	var pendingIDs []int64
	for _, env := range pending {
		pendingIDs = append(pendingIDs, env.ID)
		want := 0
		if env.ID == id(refused) {
			want = 1
		}
		if env.Attempts != want {
			t.Errorf("message %d: %d attempt(s), want %d (last error %q)", env.ID, env.Attempts, want, env.LastError)
		}
	}
	if !slices.Equal(pendingIDs, group1) {
		t.Fatalf("pending after the first Drain: %v, want group g1 from the refused message: %v", pendingIDs, group1)
	}
	dead, err := ob.ListDead(ctx, "orders", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].ID != id(12) || dead[0].Attempts != 1 {
		t.Fatalf("dead after the first Drain: %+v, want message %d alone, after 1 attempt", dead, id(12))
	}

	refusedID.Store(0)
	if res, err := ob.Drain(ctx, "orders"); err != nil || res != (core.DrainResult{Delivered: 4}) {
		t.Fatalf("second Drain = %+v, %v; want the 4 messages of g1 delivered", res, err)
	}
	// Every message but the dead one arrived once, and each group in ID order.
	want := slices.DeleteFunc(envIDs(envs), func(x int64) bool { return x == id(12) })
	got, err := read(ctx, len(want))
	if err != nil {
		t.Fatalf("read back %v: %v", got, err)
	}
	if !sameElements(got, want) || len(got) != len(want) {
		t.Fatalf("subscriber got %v, want each of %v once", got, want)
	}
	last := map[int64]int64{}
	for _, x := range got {
		g := (x - id(1)) % 4
		if x <= last[g] {
			t.Fatalf("subscriber got %d after %d in the same group: %v", x, last[g], got)
		}
		last[g] = x
	}
}

func sameElements(a, b []int64) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}
