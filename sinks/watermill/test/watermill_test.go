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
	pf := partial(t, sink.Deliver(context.Background(), batch))
	// 16 has no topic: a permanent failure (the engine marks it dead); 17..20 are held
	// back, to go in the next batch.
	checkFailed(t, pf, []int64{16}, envIDs(batch[16:]))
	if e := pf.Failed[16]; !errors.Is(e, watermillsink.ErrNoTopic) || !errors.Is(e, core.ErrPermanent) {
		t.Errorf("failure of 16 = %v, want ErrNoTopic and permanent", e)
	}
	gotEven, gotOdd := idsOf(even.got()), idsOf(odd.got())
	if want := []int64{2, 4, 6, 8, 10, 12, 14}; !slices.Equal(gotEven, want) {
		t.Errorf("even topic got %v, want %v", gotEven, want)
	}
	if want := []int64{1, 3, 5, 7, 9, 11, 13, 15}; !slices.Equal(gotOdd, want) {
		t.Errorf("odd topic got %v, want %v", gotOdd, want)
	}
	// The rest, handed again as the engine does, goes out.
	if err := sink.Deliver(context.Background(), batch[16:]); err != nil {
		t.Fatalf("Deliver of the held-back rest: %v", err)
	}
	if got := idsOf(odd.got()); !slices.Equal(got[8:], []int64{17, 19}) {
		t.Errorf("odd topic got %v after the rest", got)
	}
}

// checkFailed checks that pf names exactly the failed IDs, each with an error that is
// not a held-back one, and the held IDs, each with an error matching core.ErrHeldBack.
func checkFailed(t *testing.T, pf *core.PartialFailure, failed, held []int64) {
	t.Helper()
	want := slices.Sorted(slices.Values(append(slices.Clone(failed), held...)))
	if ids := slices.Sorted(maps.Keys(pf.Failed)); !slices.Equal(ids, want) {
		t.Fatalf("partial failure names %v, want %v (failed %v, held back %v)", ids, want, failed, held)
	}
	for _, id := range failed {
		if e := pf.Failed[id]; e == nil || errors.Is(e, core.ErrHeldBack) {
			t.Errorf("failure of %d = %v, want a failure of its own, not a held-back one", id, e)
		}
	}
	for _, id := range held {
		if e := pf.Failed[id]; !errors.Is(e, core.ErrHeldBack) || errors.Is(e, core.ErrPermanent) {
			t.Errorf("failure of %d = %v, want one matching core.ErrHeldBack, not permanent", id, e)
		}
	}
}

func TestErrEarlierFailedIsHeldBack(t *testing.T) {
	if !errors.Is(watermillsink.ErrEarlierFailed, core.ErrHeldBack) {
		t.Fatal("ErrEarlierFailed does not match core.ErrHeldBack: the engine would count an attempt for every held-back message")
	}
}

type publisherFunc func(topic string, msgs ...*message.Message) error

func (f publisherFunc) Publish(topic string, msgs ...*message.Message) error {
	return f(topic, msgs...)
}
func (f publisherFunc) Close() error { return nil }

// refuse returns a publisher that refuses every call carrying one of the ids, the way a
// broker refuses a message, and publishes the others to pub. calls counts the calls.
func refuse(pub message.Publisher, calls *atomic.Int64, ids ...int64) message.Publisher {
	return publisherFunc(func(topic string, msgs ...*message.Message) error {
		calls.Add(1)
		for _, id := range idsOf(msgs) {
			if slices.Contains(ids, id) {
				return fmt.Errorf("broker refused message %d", id)
			}
		}
		return pub.Publish(topic, msgs...)
	})
}

func TestFailedPublishFailsItAndHoldsBackTheRestOfTheBatch(t *testing.T) {
	for _, tc := range []struct {
		name      string
		batchSize int
		delivered int // messages the subscriber gets
		failed    int // messages carrying the publisher's error, after the delivered ones
		calls     int64
	}{
		{"one per call", 1, 12, 1, 13}, // message 13 is refused
		{"runs of five", 5, 10, 5, 3},  // the run 11..15 holds message 13 and fails whole
	} {
		t.Run(tc.name, func(t *testing.T) {
			pubsub := newGoChannel(t)
			ch := collect(t, pubsub, "orders")
			var calls atomic.Int64
			sink, err := watermillsink.New(refuse(pubsub, &calls, 13), watermillsink.Options{Topic: "orders", PublishBatchSize: tc.batchSize})
			if err != nil {
				t.Fatal(err)
			}
			batch := envelopes(1, 30, 4)
			pf := partial(t, sink.Deliver(context.Background(), batch))
			failed := batch[tc.delivered : tc.delivered+tc.failed]
			checkFailed(t, pf, envIDs(failed), envIDs(batch[tc.delivered+tc.failed:]))
			for _, env := range failed {
				if e := pf.Failed[env.ID]; !strings.Contains(e.Error(), "broker refused message 13") || errors.Is(e, core.ErrPermanent) {
					t.Errorf("failure of %d = %v, want the broker's, retryable", env.ID, e)
				}
			}
			for _, env := range batch[tc.delivered+tc.failed:] {
				if e := pf.Failed[env.ID]; !errors.Is(e, watermillsink.ErrEarlierFailed) {
					t.Errorf("failure of %d = %v, want ErrEarlierFailed", env.ID, e)
				}
			}
			// Nothing after the failure reached the publisher, whatever its group.
			if n := calls.Load(); n != tc.calls {
				t.Errorf("Publish called %d times, want %d", n, tc.calls)
			}
			if ids := idsOf(ch.got()); !slices.Equal(ids, envIDs(batch[:tc.delivered])) {
				t.Fatalf("subscriber got %v, want %v", ids, envIDs(batch[:tc.delivered]))
			}
		})
	}
}

func TestPermanentFailureHoldsBackTheRestOfTheBatch(t *testing.T) {
	pubsub := newGoChannel(t)
	ch := collect(t, pubsub, "orders")
	var calls atomic.Int64
	sink, err := watermillsink.New(refuse(pubsub, &calls), watermillsink.Options{Topic: "orders", MaxPayloadBytes: 64, PublishBatchSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	batch := envelopes(1, 20, 4)
	batch[5].Payload = make([]byte, 65) // 6: too large
	pf := partial(t, sink.Deliver(context.Background(), batch))
	checkFailed(t, pf, []int64{6}, envIDs(batch[6:]))
	if e := pf.Failed[6]; !errors.Is(e, watermillsink.ErrTooLarge) || !errors.Is(e, core.ErrPermanent) {
		t.Errorf("failure of 6 = %v, want ErrTooLarge, permanent", e)
	}
	if got := idsOf(ch.got()); !slices.Equal(got, []int64{1, 2, 3, 4, 5}) {
		t.Fatalf("subscriber got %v, want [1 2 3 4 5]", got)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("Publish called %d times, want 2 (1-4, 5)", n)
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

// sizeLimitedSink returns a sink (PublishBatchSize 10) on a PerMessagePublisher that
// fails the messages over 64 bytes, and what a subscriber of "orders" receives.
func sizeLimitedSink(t *testing.T) (*collector, *sizeLimited, *watermillsink.Sink) {
	t.Helper()
	pubsub := newGoChannel(t)
	ch := collect(t, pubsub, "orders")
	pub := &sizeLimited{GoChannel: pubsub, limit: 64}
	sink, err := watermillsink.New(pub, watermillsink.Options{Topic: "orders", PublishBatchSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	return ch, pub, sink
}

func TestPerMessagePublisherFailuresAreMappedExactly(t *testing.T) {
	ch, pub, sink := sizeLimitedSink(t)
	batch := envelopes(1, 25, 0)          // unordered: runs of 10
	batch[13].Payload = make([]byte, 100) // in the second run (11..20)
	pf := partial(t, sink.Deliver(context.Background(), batch))
	// The publisher reports 14 failed and the rest of its run published; the sink names
	// 14 and holds back what comes after the run.
	checkFailed(t, pf, []int64{14}, envIDs(batch[20:]))
	if e := pf.Failed[14]; !strings.Contains(e.Error(), "exceeds 64") {
		t.Errorf("failure of 14 = %v, want the publisher's", e)
	}
	if pub.calls != 2 {
		t.Errorf("PublishEach called %d times, want 2 (1-10, 11-20)", pub.calls)
	}
	got := idsOf(ch.got())
	wantGot := slices.DeleteFunc(envIDs(batch[:20]), func(id int64) bool { return id == 14 })
	if !slices.Equal(got, wantGot) {
		t.Fatalf("subscriber got %v, want %v", got, wantGot)
	}
}

// TestPerMessagePublisherKeepsGroupOrder: a PerMessagePublisher publishes the rest of a
// run past a message it fails, so a run must not hold a later message of that message's
// group: with 5 groups and PublishBatchSize 10 the runs are 1-5, 6-10, 11-15, and when
// 14 (group g4) fails, 19 and 24 (g4 too) are held back, not published before it.
func TestPerMessagePublisherKeepsGroupOrder(t *testing.T) {
	ch, pub, sink := sizeLimitedSink(t)
	batch := envelopes(1, 25, 5)
	batch[13].Payload = make([]byte, 100) // 14, group g4
	pf := partial(t, sink.Deliver(context.Background(), batch))
	checkFailed(t, pf, []int64{14}, envIDs(batch[15:]))
	if pub.calls != 3 {
		t.Errorf("PublishEach called %d times, want 3 (1-5, 6-10, 11-15)", pub.calls)
	}
	got := idsOf(ch.got())
	wantGot := slices.DeleteFunc(envIDs(batch[:15]), func(id int64) bool { return id == 14 })
	if !slices.Equal(got, wantGot) {
		t.Fatalf("subscriber got %v, want %v (nothing of 14's group after it)", got, wantGot)
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
	checkFailed(t, pf, nil, envIDs(batch[5:]))
	if !errors.Is(pf.Failed[6], context.Canceled) {
		t.Errorf("failure of 6 = %v, want context.Canceled", pf.Failed[6])
	}
	if got := idsOf(ch.got()); !slices.Equal(got, []int64{1, 2, 3, 4, 5}) {
		t.Fatalf("subscriber got %v", got)
	}

	// Done before anything was published: the whole batch failed, nothing is held back.
	err = sink.Deliver(ctx, batch[5:])
	var whole *core.PartialFailure
	if errors.As(err, &whole) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Deliver with a done context = %v, want context.Canceled for the whole batch", err)
	}
	if n != 5 {
		t.Fatalf("publisher called for %d messages, want 5", n)
	}
}
