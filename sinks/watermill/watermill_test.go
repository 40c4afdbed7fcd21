package watermillsink_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/outboxer-go/outboxer/core"
	watermillsink "github.com/outboxer-go/outboxer/sinks/watermill"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// envelopes returns n envelopes with IDs from first, spread over groups groups
// ("g0", "g1", …); groups 0 makes them unordered.
func envelopes(first int64, n, groups int) []core.Envelope {
	out := make([]core.Envelope, n)
	for i := range out {
		id := first + int64(i)
		env := core.Envelope{
			ID:      id,
			Outbox:  "orders",
			Type:    "order.placed",
			Payload: []byte(fmt.Sprintf(`{"n":%d}`, id)),
			Headers: map[string]string{"trace": "t-" + strconv.FormatInt(id, 10)},
		}
		if groups > 0 {
			env.GroupKey = "g" + strconv.Itoa(int(id)%groups)
		}
		out[i] = env
	}
	return out
}

// newGoChannel returns an in-process pub/sub that keeps order: with
// BlockPublishUntilSubscriberAck, Publish returns only after the subscribers acked the
// message, so a subscriber sees messages in publish order and, once Deliver returned,
// has seen every one of them.
func newGoChannel(t *testing.T) *gochannel.GoChannel {
	t.Helper()
	pubsub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	t.Cleanup(func() { _ = pubsub.Close() })
	return pubsub
}

// collector acks and keeps every message of one subscription.
type collector struct {
	mu   sync.Mutex
	msgs []*message.Message
}

// collect subscribes to topic and keeps what arrives until the test ends.
func collect(t *testing.T, sub message.Subscriber, topic string) *collector {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		cancel()
		t.Fatalf("subscribe %s: %v", topic, err)
	}
	c := &collector{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for msg := range ch {
			c.mu.Lock()
			c.msgs = append(c.msgs, msg)
			c.mu.Unlock()
			msg.Ack()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return c
}

func (c *collector) got() []*message.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.msgs)
}

func idsOf(msgs []*message.Message) []int64 {
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		ids[i], _ = strconv.ParseInt(m.Metadata.Get(watermillsink.MetadataID), 10, 64)
	}
	return ids
}

func envIDs(envs []core.Envelope) []int64 {
	ids := make([]int64, len(envs))
	for i, e := range envs {
		ids[i] = e.ID
	}
	return ids
}

func partial(t *testing.T, err error) *core.PartialFailure {
	t.Helper()
	var pf *core.PartialFailure
	if !errors.As(err, &pf) {
		t.Fatalf("Deliver returned %v (%T), want a *core.PartialFailure", err, err)
	}
	return pf
}

func TestNewValidatesOptions(t *testing.T) {
	pub := newGoChannel(t)
	for _, tc := range []struct {
		name string
		pub  message.Publisher
		opts watermillsink.Options
		want string
	}{
		{"nil publisher", nil, watermillsink.Options{Topic: "x"}, "publisher is nil"},
		{"no topic", pub, watermillsink.Options{}, "Options.Topic or Options.TopicFunc"},
		{"negative batch", pub, watermillsink.Options{Topic: "x", PublishBatchSize: -1}, "Options.PublishBatchSize"},
		{"negative size", pub, watermillsink.Options{Topic: "x", MaxPayloadBytes: -1}, "Options.MaxPayloadBytes"},
		{"bad ordering", pub, watermillsink.Options{Topic: "x", Ordering: core.Ordering(7)}, "Options.Ordering"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := watermillsink.New(tc.pub, tc.opts)
			if err == nil || s != nil {
				t.Fatalf("New = %v, %v; want an error", s, err)
			}
			if got := err.Error(); !strings.Contains(got, tc.want) {
				t.Fatalf("error %q does not name %q", got, tc.want)
			}
		})
	}
}

func TestMessageUUIDIsStablePerTableAndID(t *testing.T) {
	a := watermillsink.MessageUUID("outboxer_messages", 42)
	if a != watermillsink.MessageUUID("outboxer_messages", 42) {
		t.Fatal("same row, different UUIDs")
	}
	// The value is part of the contract: a consumer that stored UUIDs before an upgrade
	// must still recognise a re-delivered message after it.
	if want := "14eed6bb-65bb-50de-9bca-bd02418bed68"; a != want {
		t.Fatalf("MessageUUID changed: %s, was %s", a, want)
	}
	u, err := uuid.Parse(a)
	if err != nil || u.Version() != 5 {
		t.Fatalf("MessageUUID = %q (err %v), want a version 5 UUID", a, err)
	}
	seen := map[string]string{}
	for _, table := range []string{"outboxer_messages", "order_outbox"} {
		for id := int64(1); id <= 1000; id++ {
			k := watermillsink.MessageUUID(table, id)
			if prev, dup := seen[k]; dup {
				t.Fatalf("%s/%d and %s share UUID %s", table, id, prev, k)
			}
			seen[k] = table + "/" + strconv.FormatInt(id, 10)
		}
	}
}

func TestGoChannelDeliversBatchInOrderWithMetadata(t *testing.T) {
	pubsub := newGoChannel(t)
	ch := collect(t, pubsub, "orders")
	sink, err := watermillsink.New(pubsub, watermillsink.Options{Topic: "orders", Table: "order_outbox"})
	if err != nil {
		t.Fatal(err)
	}
	batch := envelopes(100, 50, 3)
	batch[7].GroupKey = "" // one unordered message
	batch[8].Headers[watermillsink.MetadataType] = "spoofed"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sink.Deliver(ctx, batch); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	got := ch.got()
	if len(got) != len(batch) {
		t.Fatalf("subscriber got %d messages, want %d", len(got), len(batch))
	}
	for i, msg := range got {
		env := batch[i]
		if want := watermillsink.MessageUUID("order_outbox", env.ID); msg.UUID != want {
			t.Errorf("message %d: UUID %s, want %s", i, msg.UUID, want)
		}
		if string(msg.Payload) != string(env.Payload) {
			t.Errorf("message %d: payload %q, want %q", i, msg.Payload, env.Payload)
		}
		want := message.Metadata{
			"trace":                        env.Headers["trace"],
			watermillsink.MetadataID:       strconv.FormatInt(env.ID, 10),
			watermillsink.MetadataOutbox:   "orders",
			watermillsink.MetadataType:     "order.placed",
			watermillsink.MetadataGroupKey: env.GroupKey,
		}
		if env.GroupKey == "" {
			delete(want, watermillsink.MetadataGroupKey)
		}
		if !maps.Equal(msg.Metadata, want) {
			t.Errorf("message %d: metadata %v, want %v", i, msg.Metadata, want)
		}
	}
	if ids := idsOf(got); !slices.Equal(ids, envIDs(batch)) {
		t.Fatalf("received ids %v, want %v", ids, envIDs(batch))
	}
}

func TestTopicFuncRoutesAndEmptyTopicFailsPermanently(t *testing.T) {
	pubsub := newGoChannel(t)
	even, odd := collect(t, pubsub, "even"), collect(t, pubsub, "odd")
	sink, err := watermillsink.New(pubsub, watermillsink.Options{
		Topic: "ignored",
		TopicFunc: func(env core.Envelope) string {
			switch {
			case env.ID == 16:
				return ""
			case env.ID%2 == 0:
				return "even"
			}
			return "odd"
		},
		PublishBatchSize: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	batch := envelopes(1, 20, 2)
	err = sink.Deliver(context.Background(), batch)
	pf := partial(t, err)
	// A permanent failure holds nothing back: the engine marks 16 dead, its group goes on.
	if ids := slices.Sorted(maps.Keys(pf.Failed)); !slices.Equal(ids, []int64{16}) {
		t.Fatalf("failed ids %v, want [16]", ids)
	}
	if e := pf.Failed[16]; !errors.Is(e, watermillsink.ErrNoTopic) || !errors.Is(e, core.ErrPermanent) {
		t.Errorf("failure of 16 = %v, want ErrNoTopic and permanent", e)
	}
	gotEven, gotOdd := idsOf(even.got()), idsOf(odd.got())
	if want := []int64{2, 4, 6, 8, 10, 12, 14, 18, 20}; !slices.Equal(gotEven, want) {
		t.Errorf("even topic got %v, want %v", gotEven, want)
	}
	if want := []int64{1, 3, 5, 7, 9, 11, 13, 15, 17, 19}; !slices.Equal(gotOdd, want) {
		t.Errorf("odd topic got %v, want %v", gotOdd, want)
	}
}

// closeAfter is a Watermill publisher decorator that closes the real GoChannel when the
// n-th message is about to be published, so that its Publish fails from there on: a
// publisher going away in the middle of a batch.
func closeAfter(pubsub *gochannel.GoChannel, n int64) message.PublisherDecorator {
	var published atomic.Int64
	return func(pub message.Publisher) (message.Publisher, error) {
		return publisherFunc(func(topic string, msgs ...*message.Message) error {
			if published.Add(int64(len(msgs))) > n {
				_ = pubsub.Close()
			}
			return pub.Publish(topic, msgs...)
		}), nil
	}
}

type publisherFunc func(topic string, msgs ...*message.Message) error

func (f publisherFunc) Publish(topic string, msgs ...*message.Message) error {
	return f(topic, msgs...)
}
func (f publisherFunc) Close() error { return nil }

func TestFailedPublishFailsItAndTheRestOfTheBatch(t *testing.T) {
	for _, tc := range []struct {
		name      string
		batchSize int
		delivered int // messages the subscriber gets and Deliver counts delivered
	}{
		{"one per call", 1, 12}, // message 13 fails
		{"runs of five", 5, 10}, // the run 11..15 holds message 13 and fails whole
	} {
		t.Run(tc.name, func(t *testing.T) {
			pubsub := newGoChannel(t)
			ch := collect(t, pubsub, "orders")
			pub, err := closeAfter(pubsub, 12)(pubsub)
			if err != nil {
				t.Fatal(err)
			}
			sink, err := watermillsink.New(pub, watermillsink.Options{Topic: "orders", PublishBatchSize: tc.batchSize})
			if err != nil {
				t.Fatal(err)
			}
			batch := envelopes(1, 30, 4)
			pf := partial(t, sink.Deliver(context.Background(), batch))
			if ids := slices.Sorted(maps.Keys(pf.Failed)); !slices.Equal(ids, envIDs(batch[tc.delivered:])) {
				t.Fatalf("failed ids %v, want %v", ids, envIDs(batch[tc.delivered:]))
			}
			if e := pf.Failed[batch[tc.delivered].ID]; errors.Is(e, watermillsink.ErrEarlierFailed) || errors.Is(e, core.ErrPermanent) {
				t.Errorf("the failed message's error %v should be the publisher's, retryable", e)
			}
			if ids := idsOf(ch.got()); !slices.Equal(ids, envIDs(batch[:tc.delivered])) {
				t.Fatalf("subscriber got %v, want %v", ids, envIDs(batch[:tc.delivered]))
			}
		})
	}
}

// sizeLimited is a PerMessagePublisher over a real GoChannel that refuses payloads
// larger than limit, as a broker with a maximum message size does, and publishes the
// others.
type sizeLimited struct {
	*gochannel.GoChannel
	limit int
	calls int
}

func (p *sizeLimited) PublishEach(topic string, msgs ...*message.Message) []error {
	p.calls++
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		if len(m.Payload) > p.limit {
			errs[i] = fmt.Errorf("message of %d bytes exceeds %d", len(m.Payload), p.limit)
			continue
		}
		errs[i] = p.Publish(topic, m)
	}
	return errs
}

func TestPerMessagePublisherFailuresAreMappedExactly(t *testing.T) {
	pubsub := newGoChannel(t)
	ch := collect(t, pubsub, "orders")
	pub := &sizeLimited{GoChannel: pubsub, limit: 64}
	sink, err := watermillsink.New(pub, watermillsink.Options{Topic: "orders", PublishBatchSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	batch := envelopes(1, 25, 5)
	batch[13].Payload = make([]byte, 100) // in the second run (11..20)
	pf := partial(t, sink.Deliver(context.Background(), batch))
	// 14 (group g4) fails; the rest of its run had gone out already; 24, the next of g4,
	// is held back; everything else is published, in runs around it.
	if ids := slices.Sorted(maps.Keys(pf.Failed)); !slices.Equal(ids, []int64{14, 24}) {
		t.Fatalf("failed ids %v, want [14 24]", ids)
	}
	if !errors.Is(pf.Failed[24], watermillsink.ErrEarlierFailed) || errors.Is(pf.Failed[14], watermillsink.ErrEarlierFailed) {
		t.Errorf("failures: 14: %v, 24: %v", pf.Failed[14], pf.Failed[24])
	}
	if pub.calls != 4 {
		t.Errorf("PublishEach called %d times, want 4 (1-10, 11-20, 21-23, 25)", pub.calls)
	}
	got := idsOf(ch.got())
	wantGot := slices.DeleteFunc(envIDs(batch), func(id int64) bool { return id == 14 || id == 24 })
	if !slices.Equal(got, wantGot) {
		t.Fatalf("subscriber got %v, want %v", got, wantGot)
	}
}

func TestDeliverStopsWhenContextIsDone(t *testing.T) {
	pubsub := newGoChannel(t)
	ch := collect(t, pubsub, "orders")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	pub := publisherFunc(func(topic string, msgs ...*message.Message) error {
		err := pubsub.Publish(topic, msgs...)
		if n += len(msgs); n == 5 {
			cancel() // the deadline passes while message 5 is being published
		}
		return err
	})
	sink, err := watermillsink.New(pub, watermillsink.Options{Topic: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	batch := envelopes(1, 10, 0)
	pf := partial(t, sink.Deliver(ctx, batch))
	if ids := slices.Sorted(maps.Keys(pf.Failed)); !slices.Equal(ids, envIDs(batch[5:])) {
		t.Fatalf("failed ids %v, want %v", ids, envIDs(batch[5:]))
	}
	if !errors.Is(pf.Failed[6], context.Canceled) {
		t.Errorf("failure of 6 = %v, want context.Canceled", pf.Failed[6])
	}
	if got := idsOf(ch.got()); !slices.Equal(got, []int64{1, 2, 3, 4, 5}) {
		t.Fatalf("subscriber got %v", got)
	}
}

// refuse returns a publisher that refuses every call carrying one of the ids, the way a
// broker refuses a message, and publishes the others to pub.
func refuse(pub message.Publisher, ids ...int64) message.Publisher {
	return publisherFunc(func(topic string, msgs ...*message.Message) error {
		for _, id := range idsOf(msgs) {
			if slices.Contains(ids, id) {
				return fmt.Errorf("broker refused message %d", id)
			}
		}
		return pub.Publish(topic, msgs...)
	})
}

func TestFailureHoldsBackWhatTheOrderingSays(t *testing.T) {
	for _, tc := range []struct {
		ordering core.Ordering
		failed   []int64
	}{
		{core.OrderGroup, []int64{6, 10, 14, 18}}, // 6's group g2 (IDs ≡ 2 mod 4)
		{core.OrderTotal, []int64{6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}},
		{core.OrderNone, []int64{6}},
	} {
		t.Run(tc.ordering.String(), func(t *testing.T) {
			pubsub := newGoChannel(t)
			ch := collect(t, pubsub, "orders")
			sink, err := watermillsink.New(refuse(pubsub, 6), watermillsink.Options{
				Topic: "orders", Ordering: tc.ordering, MaxPayloadBytes: 64,
			})
			if err != nil {
				t.Fatal(err)
			}
			batch := envelopes(1, 20, 4)
			batch[2].Payload = make([]byte, 65) // 3: too large, permanent: holds nothing back
			pf := partial(t, sink.Deliver(context.Background(), batch))
			want := slices.Sorted(slices.Values(append([]int64{3}, tc.failed...)))
			if ids := slices.Sorted(maps.Keys(pf.Failed)); !slices.Equal(ids, want) {
				t.Fatalf("failed ids %v, want %v", ids, want)
			}
			if e := pf.Failed[3]; !errors.Is(e, watermillsink.ErrTooLarge) || !errors.Is(e, core.ErrPermanent) {
				t.Errorf("failure of 3 = %v, want ErrTooLarge, permanent", e)
			}
			if e := pf.Failed[6]; errors.Is(e, core.ErrPermanent) || errors.Is(e, watermillsink.ErrEarlierFailed) {
				t.Errorf("failure of 6 = %v, want the broker's, retryable", e)
			}
			for _, id := range tc.failed[1:] {
				if !errors.Is(pf.Failed[id], watermillsink.ErrEarlierFailed) {
					t.Errorf("failure of %d = %v, want ErrEarlierFailed", id, pf.Failed[id])
				}
			}
			wantGot := slices.DeleteFunc(envIDs(batch), func(id int64) bool { return slices.Contains(want, id) })
			if got := idsOf(ch.got()); !slices.Equal(got, wantGot) {
				t.Fatalf("subscriber got %v, want %v", got, wantGot)
			}
		})
	}
}
