package watermillsink_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
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

// TestMiddlewareRunsEachMessageOnce: behind the middleware, a message the relay
// delivered twice runs the handler once; a handler error rolls back its write and the
// message is nacked (GoChannel delivers it again), and the redelivery runs it.
func TestMiddlewareRunsEachMessageOnce(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		pubsub := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
		defer pubsub.Close()
		middlewareOnce(t, db, pubsub, pubsub, "orders")
	})
}

// TestMiddlewareRunsEachMessageOnceOnRabbitMQ: the same through RabbitMQ, which
// redelivers the nacked message.
func TestMiddlewareRunsEachMessageOnceOnRabbitMQ(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		q := newRabbitQueue(t)
		middlewareOnce(t, db, q.pub, q.sub, q.name)
	})
}

func middlewareOnce(t *testing.T, db *dbtest.DB, pub message.Publisher, sub message.Subscriber, topic string) {
	in := dbtest.ConsumerInbox(t, db)
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	calls := map[int64]int{}
	failed := false
	boom := errors.New("boom")
	router.AddConsumerHandler("billing", topic, sub, func(msg *message.Message) error {
		tx, o := watermillsink.Tx(msg)
		if tx == nil || o != inbox.Claimed {
			return fmt.Errorf("no transaction (%v, %v)", tx, o)
		}
		id, _ := strconv.ParseInt(msg.Metadata.Get(watermillsink.MetadataID), 10, 64)
		mu.Lock()
		calls[id]++
		fail := id == 3 && !failed
		failed = failed || fail
		mu.Unlock()
		if _, err := tx.ExecContext(msg.Context(), fmt.Sprintf(`INSERT INTO effects (id) VALUES (%d)`, id)); err != nil {
			return err
		}
		if fail {
			return boom
		}
		return nil
	})
	// Outermost: counts the deliveries acked and notes unexpected errors.
	acked := 0
	var other []error
	router.AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				acked++
			} else if !errors.Is(err, boom) {
				other = append(other, err)
			}
			return out, err
		}
	}, watermillsink.Middleware(in, "billing"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- router.Run(ctx) }()
	<-router.Running()

	sink, err := watermillsink.New(pub, watermillsink.Options{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	for _, ids := range [][]int64{{1, 2, 3}, {2, 3}, {4}} { // the relay delivers 2 and 3 again
		var batch []core.Envelope
		for _, id := range ids {
			batch = append(batch, core.Envelope{ID: id, Outbox: "orders", Type: "order.placed", GroupKey: "c1", Payload: []byte(`{}`)})
		}
		if err := sink.Deliver(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	// Six deliveries (1, 2, 3, 2, 3, 4; a message nacked counts when redelivered).
	for ctx.Err() == nil {
		mu.Lock()
		n := acked
		mu.Unlock()
		if n >= 6 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("router: %v", err)
	}
	e := dbtest.Effects(t, db.DB)
	for id := int64(1); id <= 4; id++ {
		if e[id] != 1 {
			t.Errorf("effect of message %d committed %d times, want 1 (%v)", id, e[id], e)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if acked != 6 || len(other) > 0 {
		t.Errorf("%d deliveries acked, want 6; other errors: %v", acked, other)
	}
	if want := map[int64]int{1: 1, 2: 1, 3: 2, 4: 1}; fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Errorf("handler calls %v, want %v (3 failed once and was delivered again)", calls, want)
	}
}

// TestMiddlewareRefusesMessagesWithoutKey: a message the sink did not publish has no
// key; with inbox.StopOnForeign the middleware fails it without running the handler.
func TestMiddlewareRefusesMessagesWithoutKey(t *testing.T) {
	db := dbtest.SQLite(t)
	in := dbtest.ConsumerInbox(t, db)
	ran := false
	h := watermillsink.Middleware(in, "billing", watermillsink.OnForeign(inbox.StopOnForeign))(func(*message.Message) ([]*message.Message, error) { ran = true; return nil, nil })
	if _, err := h(message.NewMessage(watermill.NewUUID(), []byte(`{}`))); !errors.Is(err, inbox.ErrNoKey) || ran {
		t.Errorf("message without a key: %v (handler ran: %v), want inbox.ErrNoKey", err, ran)
	}
	msg := message.NewMessage("x", nil)
	msg.Metadata.Set(core.HeaderKey, core.MessageKey("db", "t", 1))
	m, err := watermillsink.MessageOf(msg)
	if err != nil || m.Key != core.MessageKey("db", "t", 1) {
		t.Errorf("MessageOf(message with %s) = %+v, %v", core.HeaderKey, m, err)
	}
}

// BenchmarkConsumer measures a consumer's throughput through a Watermill router on
// GoChannel, one message at a time (the publisher waits for each ack): each message's handler writes one row in a transaction, without the inbox
// (the handler begins and commits it) and with the inbox's middleware (the claim comes
// first in the middleware's transaction).
func BenchmarkConsumer(b *testing.B) {
	for _, d := range []core.Dialect{core.Postgres, core.SQLite} {
		for _, withInbox := range []bool{false, true} {
			name := string(d) + "/plain"
			if withInbox {
				name = string(d) + "/inbox"
			}
			b.Run(name, func(b *testing.B) {
				db := dbtest.Open(b, d)
				in := dbtest.ConsumerInbox(b, db)
				pubsub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
				defer pubsub.Close()
				router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
				if err != nil {
					b.Fatal(err)
				}
				var done atomic.Int64
				all := make(chan struct{})
				want := int64(b.N)
				write := func(ctx context.Context, tx *sql.Tx, msg *message.Message) error {
					_, err := tx.ExecContext(ctx, `INSERT INTO effects (id) VALUES (`+msg.Metadata.Get(watermillsink.MetadataID)+`)`)
					return err
				}
				router.AddConsumerHandler("billing", "orders", pubsub, func(msg *message.Message) error {
					if withInbox {
						tx, _ := watermillsink.Tx(msg)
						if err := write(msg.Context(), tx, msg); err != nil {
							return err
						}
					} else {
						tx, err := db.BeginTx(msg.Context(), nil)
						if err != nil {
							return err
						}
						defer tx.Rollback()
						if err := write(msg.Context(), tx, msg); err != nil {
							return err
						}
						if err := tx.Commit(); err != nil {
							return err
						}
					}
					if done.Add(1) == want {
						close(all)
					}
					return nil
				})
				if withInbox {
					router.AddMiddleware(watermillsink.Middleware(in, "billing"))
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				ran := make(chan error, 1)
				go func() { ran <- router.Run(ctx) }()
				<-router.Running()
				sink, err := watermillsink.New(pubsub, watermillsink.Options{Topic: "orders"})
				if err != nil {
					b.Fatal(err)
				}
				batch := make([]core.Envelope, b.N)
				for i := range batch {
					batch[i] = core.Envelope{ID: int64(i + 1), Outbox: "orders", Type: "order.placed", Payload: []byte(`{}`)}
				}
				b.ResetTimer()
				if err := sink.Deliver(ctx, batch); err != nil {
					b.Fatal(err)
				}
				select {
				case <-all:
				case <-time.After(5 * time.Minute):
					b.Fatalf("%d of %d messages handled", done.Load(), b.N)
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
				cancel()
				<-ran
			})
		}
	}
}
