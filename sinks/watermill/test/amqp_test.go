package watermillsink_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/outboxer-go/outboxer/core"
	watermillsink "github.com/outboxer-go/outboxer/sinks/watermill"
)

// amqpURI is the RabbitMQ the tests use: OUTBOXER_TEST_AMQP, or the local service.
func amqpURI() string {
	if u := os.Getenv("OUTBOXER_TEST_AMQP"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// requireRabbitMQ skips the test when RabbitMQ cannot be reached, and fails it in CI.
func requireRabbitMQ(t testing.TB) {
	t.Helper()
	u, err := url.Parse(amqpURI())
	if err != nil {
		t.Fatalf("OUTBOXER_TEST_AMQP: %v", err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 3*time.Second)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("RabbitMQ is unavailable in CI: %v", err)
		}
		t.Skipf("RabbitMQ is unavailable: %v", err)
	}
	conn.Close()
}

func randomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// rabbitQueue is a fresh RabbitMQ queue (deleted when the test ends) with a Watermill
// publisher and subscriber on it. The publisher waits for the broker's confirmation of
// every message, so a nil from Publish means RabbitMQ has the message.
type rabbitQueue struct {
	name string
	pub  *amqp.Publisher
	sub  *amqp.Subscriber
}

func newRabbitQueue(t testing.TB) *rabbitQueue {
	t.Helper()
	requireRabbitMQ(t)
	q := &rabbitQueue{name: randomName("outboxer_test_")}
	cfg := amqp.NewNonDurableQueueConfig(amqpURI())
	cfg.Publish.ConfirmDelivery = true
	cfg.Publish.ChannelPoolSize = 1
	cfg.Consume.Qos.PrefetchCount = 200
	logger := watermill.NopLogger{}
	var err error
	if q.sub, err = amqp.NewSubscriber(cfg, logger); err != nil {
		t.Fatalf("amqp subscriber: %v", err)
	}
	t.Cleanup(func() { _ = q.sub.Close() })
	// Declare the queue before anything is published to it.
	if err := q.sub.SubscribeInitialize(q.name); err != nil {
		t.Fatalf("declare queue: %v", err)
	}
	t.Cleanup(func() { deleteQueue(t, q.name) })
	if q.pub, err = amqp.NewPublisher(cfg, logger); err != nil {
		t.Fatalf("amqp publisher: %v", err)
	}
	t.Cleanup(func() { _ = q.pub.Close() })
	return q
}

func deleteQueue(t testing.TB, name string) {
	conn, err := amqp091.Dial(amqpURI())
	if err != nil {
		t.Logf("delete queue %s: %v", name, err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Logf("delete queue %s: %v", name, err)
		return
	}
	defer ch.Close()
	if _, err := ch.QueueDelete(name, false, false, false); err != nil {
		t.Logf("delete queue %s: %v", name, err)
	}
}

// consume reads n messages from the queue, acking each, and sends them on the returned
// channel once all arrived (or fewer, if timeout passes first).
func (q *rabbitQueue) consume(t testing.TB, n int, timeout time.Duration) <-chan []*message.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	ch, err := q.sub.Subscribe(ctx, q.name)
	if err != nil {
		cancel()
		t.Fatalf("subscribe: %v", err)
	}
	out := make(chan []*message.Message, 1)
	go func() {
		defer cancel()
		msgs := make([]*message.Message, 0, n)
		for len(msgs) < n {
			select {
			case msg, ok := <-ch:
				if !ok {
					out <- msgs
					return
				}
				msg.Ack()
				msgs = append(msgs, msg)
			case <-ctx.Done():
				out <- msgs
				return
			}
		}
		out <- msgs
	}()
	return out
}

// TestRabbitMQKeepsOrderPerGroup relays thousands of messages of many interleaved groups
// through a real RabbitMQ queue, re-delivers one batch as the engine does after a crash,
// and checks on a real subscriber that every message arrived, that the re-delivered
// ones carry the same UUIDs (so deduplication by UUID works), and that after
// deduplication each group is in ID order.
func TestRabbitMQKeepsOrderPerGroup(t *testing.T) {
	for _, runSize := range []int{1, 100} {
		t.Run("PublishBatchSize="+strconv.Itoa(runSize), func(t *testing.T) {
			const (
				total     = 5000
				batchSize = 100
				groups    = 37
				replayed  = 17 // the batch delivered twice
			)
			q := newRabbitQueue(t)
			sink, err := watermillsink.New(q.pub, watermillsink.Options{Topic: q.name, PublishBatchSize: runSize})
			if err != nil {
				t.Fatal(err)
			}
			received := q.consume(t, total+batchSize, 2*time.Minute)
			all := envelopes(1, total, groups)
			for b := 0; b*batchSize < total; b++ {
				batch := all[b*batchSize : (b+1)*batchSize]
				times := 1
				if b == replayed {
					times = 2
				}
				for range times {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					err := sink.Deliver(ctx, batch)
					cancel()
					if err != nil {
						t.Fatalf("batch %d: Deliver: %v", b, err)
					}
				}
			}
			msgs := <-received
			if len(msgs) != total+batchSize {
				t.Fatalf("subscriber got %d messages, want %d", len(msgs), total+batchSize)
			}
			byUUID := make(map[string]*message.Message, total)
			lastInGroup := map[string]int64{}
			dups := 0
			for _, msg := range msgs {
				id, err := strconv.ParseInt(msg.Metadata.Get(watermillsink.MetadataID), 10, 64)
				if err != nil {
					t.Fatalf("message %s: bad %s: %v", msg.UUID, watermillsink.MetadataID, err)
				}
				if want := watermillsink.MessageUUID(core.DefaultTable, id); msg.UUID != want {
					t.Fatalf("message %d: UUID %s, want %s", id, msg.UUID, want)
				}
				if prev, seen := byUUID[msg.UUID]; seen {
					if string(prev.Payload) != string(msg.Payload) {
						t.Fatalf("message %d delivered twice with different payloads", id)
					}
					dups++
					continue
				}
				byUUID[msg.UUID] = msg
				env := all[id-1]
				if string(msg.Payload) != string(env.Payload) || msg.Metadata.Get("trace") != env.Headers["trace"] ||
					msg.Metadata.Get(watermillsink.MetadataGroupKey) != env.GroupKey {
					t.Fatalf("message %d arrived as payload %q metadata %v", id, msg.Payload, msg.Metadata)
				}
				if last := lastInGroup[env.GroupKey]; id <= last {
					t.Fatalf("group %s: message %d arrived after %d", env.GroupKey, id, last)
				}
				lastInGroup[env.GroupKey] = id
			}
			if len(byUUID) != total || dups != batchSize {
				t.Fatalf("distinct messages %d (want %d), duplicates %d (want %d)", len(byUUID), total, dups, batchSize)
			}
		})
	}
}
