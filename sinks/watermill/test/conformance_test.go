package watermillsink_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"maps"
	"strconv"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/outboxer-go/outboxer/dbtest"
	watermillsink "github.com/outboxer-go/outboxer/sinks/watermill"
	"github.com/outboxer-go/outboxer/sinktest"
)

// TestConformance runs the sink conformance suite on a real RabbitMQ: each case gets a
// queue of its own, a publisher waiting for the broker's confirmations, and a real
// subscriber reading the queue back.
func TestConformance(t *testing.T) {
	const maxBytes = 256 << 10
	requireRabbitMQ(t)
	sinktest.Run(t, sinktest.Harness{
		New: func(t *testing.T) *sinktest.Target {
			q := newRabbitQueue(t)
			// FailNext(n): the broker takes one more publish, then refuses n. The sink
			// stops a batch at its first failure and holds back the rest, so a refusal
			// of the batch's very first publish would name the whole batch, and the
			// suite's partial-failure case wants part of it delivered.
			var (
				mu           sync.Mutex
				pass, refuse int
			)
			pub := publisherFunc(func(topic string, msgs ...*message.Message) error {
				mu.Lock()
				refused := false
				switch {
				case refuse > 0 && pass > 0:
					pass--
				case refuse > 0:
					refuse--
					refused = true
				}
				mu.Unlock()
				if refused {
					return errors.New("broker refused the publish (injected)")
				}
				return q.pub.Publish(topic, msgs...)
			})
			sink, err := watermillsink.New(pub, watermillsink.Options{Topic: q.name, MaxPayloadBytes: maxBytes})
			if err != nil {
				t.Fatal(err)
			}
			r := newQueueReader(t, q)
			return &sinktest.Target{
				Relay:    sink,
				Read:     r.read,
				FailNext: func(n int) { mu.Lock(); pass, refuse = 1, n; mu.Unlock() },
			}
		},
		MaxMessageBytes: maxBytes,
		Parallel:        true,
		DB:              func(t *testing.T) *sql.DB { return dbtest.Postgres(t).DB },
		// RabbitMQ's own limit (max_message_size, 128 MiB by default and server-wide)
		// is too large to hit in a test; the sink's MaxPayloadBytes check, set to the
		// broker's limit, is what refuses an oversize message before RabbitMQ sees it.
		Poisons: []sinktest.Poison{{
			Name:      "oversize",
			Payload:   bytes.Repeat([]byte("x"), maxBytes+1),
			Permanent: true,
			Reason:    "payload too large",
			By:        "sink: the MaxPayloadBytes check refuses it before RabbitMQ sees it",
		}},
		PoisonScore: func(t *testing.T, r sinktest.PoisonResult) {
			dbtest.Record(t, dbtest.Score{
				Scenario: "7 poison message", Variant: r.Poison.Name + " " + r.Variant, Database: "watermill",
				Published: r.Published, Committed: r.Committed, Delivered: r.Delivered, Lost: r.Lost,
				Reordered: r.Reordered, Duplicated: r.Duplicated, Recover: r.Recover,
				Notes: r.Poison.By + "; " + r.Outcome,
			})
		},
	})
}

// queueReader keeps every message of a queue, in arrival order.
type queueReader struct {
	mu     sync.Mutex
	got    []sinktest.Received
	notify chan struct{} // closed and replaced when a message arrives
}

func newQueueReader(t *testing.T, q *rabbitQueue) *queueReader {
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := q.sub.Subscribe(ctx, q.name)
	if err != nil {
		cancel()
		t.Fatalf("subscribe: %v", err)
	}
	r := &queueReader{notify: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for msg := range ch {
			rec := decode(msg)
			msg.Ack()
			r.mu.Lock()
			r.got = append(r.got, rec)
			close(r.notify)
			r.notify = make(chan struct{})
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return r
}

func (r *queueReader) read(ctx context.Context, n int) ([]sinktest.Received, error) {
	for {
		r.mu.Lock()
		got, notify := append([]sinktest.Received(nil), r.got...), r.notify
		r.mu.Unlock()
		if len(got) >= n {
			return got, nil
		}
		select {
		case <-notify:
		case <-ctx.Done():
			return got, ctx.Err()
		}
	}
}

// decode turns a message back into the envelope fields it carries.
func decode(msg *message.Message) sinktest.Received {
	id, _ := strconv.ParseInt(msg.Metadata.Get(watermillsink.MetadataID), 10, 64)
	headers := maps.Clone(map[string]string(msg.Metadata))
	for _, k := range []string{watermillsink.MetadataID, watermillsink.MetadataOutbox, watermillsink.MetadataType, watermillsink.MetadataGroupKey} {
		delete(headers, k)
	}
	return sinktest.Received{
		ID:       id,
		Outbox:   msg.Metadata.Get(watermillsink.MetadataOutbox),
		Type:     msg.Metadata.Get(watermillsink.MetadataType),
		GroupKey: msg.Metadata.Get(watermillsink.MetadataGroupKey),
		Payload:  msg.Payload,
		Headers:  headers,
	}
}
