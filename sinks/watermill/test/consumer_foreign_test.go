package watermillsink_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
	watermillsink "github.com/outboxer-go/outboxer/sinks/watermill"
)

// foreignRabbit is a RabbitMQ queue holding outbox message 1, a message of another
// publisher (UUID "legacy-7", payload "legacy 7", metadata source: legacy; no key, no
// outboxer_id) and outbox messages 2 and 3, in that order, with the consumer's inbox
// (logging to logs) on a fresh SQLite database.
type foreignRabbit struct {
	q    *rabbitQueue
	sink *watermillsink.Sink
	db   *dbtest.DB
	in   *inbox.Inbox
	logs *dbtest.Logs

	mu     sync.Mutex
	calls  map[int64]int
	failed []error // the errors the middleware returned
}

func newForeignRabbit(t *testing.T) *foreignRabbit {
	t.Helper()
	r := &foreignRabbit{q: newRabbitQueue(t), db: dbtest.SQLite(t), calls: map[int64]int{}}
	var logger *slog.Logger
	r.logs, logger = dbtest.NewLogs()
	var err error
	if r.in, err = inbox.New(inbox.Config{DB: r.db.DB, Dialect: r.db.Dialect, Logger: logger}); err != nil {
		t.Fatal(err)
	}
	if err := r.in.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.db.Exec(`CREATE TABLE effects (id BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if r.sink, err = watermillsink.New(r.q.pub, watermillsink.Options{Topic: r.q.name}); err != nil {
		t.Fatal(err)
	}
	r.send(t, 1)
	foreign := message.NewMessage("legacy-7", []byte("legacy 7"))
	foreign.Metadata.Set("source", "legacy")
	if err := r.q.pub.Publish(r.q.name, foreign); err != nil {
		t.Fatal(err)
	}
	r.send(t, 2, 3)
	return r
}

func (r *foreignRabbit) send(t *testing.T, ids ...int64) {
	t.Helper()
	var batch []core.Envelope
	for _, id := range ids {
		batch = append(batch, core.Envelope{ID: id, Outbox: "orders", Type: "order.placed", Payload: []byte(`{}`)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.sink.Deliver(ctx, batch); err != nil {
		t.Fatalf("Deliver %v: %v", ids, err)
	}
}

func (r *foreignRabbit) ran(id int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[id]
}

func (r *foreignRabbit) skipped() int { return len(r.logs.Lines(slog.LevelWarn, "without a key")) }

// run starts a router on a subscriber of its own to the queue, with the inbox
// middleware and opts, until the returned stop is called (which waits for the router).
func (r *foreignRabbit) run(t *testing.T, opts ...watermillsink.ConsumerOption) (stop func()) {
	t.Helper()
	sub, err := amqp.NewSubscriber(amqp.NewNonDurableQueueConfig(amqpURI()), watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	router.AddConsumerHandler("billing", r.q.name, sub, func(msg *message.Message) error {
		tx, _ := watermillsink.Tx(msg)
		id, _ := strconv.ParseInt(msg.Metadata.Get(watermillsink.MetadataID), 10, 64)
		r.mu.Lock()
		r.calls[id]++
		r.mu.Unlock()
		_, err := tx.ExecContext(msg.Context(), `INSERT INTO effects (id) VALUES (?)`, id)
		return err
	})
	router.AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err != nil {
				r.mu.Lock()
				r.failed = append(r.failed, err)
				r.mu.Unlock()
			}
			return out, err
		}
	}, watermillsink.Middleware(r.in, "billing", opts...))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	ran := make(chan error, 1)
	go func() { ran <- router.Run(ctx) }()
	<-router.Running()
	return func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("router: %v", err)
		}
	}
}

// waitFor polls cond until it holds, failing the test after 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMiddlewareSkipsForeignMessagesByDefault: without OnForeign, a message of another
// publisher on the queue is acked with a warning to the inbox's logger, without
// running the handler; the outbox messages around it run once each, and a consumer
// started afterwards on the queue does not receive it again.
func TestMiddlewareSkipsForeignMessagesByDefault(t *testing.T) {
	t.Parallel()
	r := newForeignRabbit(t)
	stop := r.run(t)
	waitFor(t, "messages 1 to 3 and the warning", func() bool {
		return r.ran(1) == 1 && r.ran(2) == 1 && r.ran(3) == 1 && r.skipped() == 1
	})
	stop()
	if l := r.logs.Lines(slog.LevelWarn, "without a key"); len(l) != 1 || l[0].Attrs["consumer"] != "billing" || l[0].Attrs["message"] != "legacy-7" {
		t.Errorf("warnings %v, want one naming consumer billing and legacy-7\n%s", l, r.logs)
	}

	// A consumer started afterwards: the queue holds only what comes next.
	r.send(t, 4)
	stop = r.run(t)
	waitFor(t, "message 4", func() bool { return r.ran(4) == 1 })
	stop()
	if n := r.skipped(); n != 1 {
		t.Errorf("the foreign message was skipped %d times, want once\n%s", n, r.logs)
	}
	if len(r.failed) != 0 || r.ran(0) != 0 {
		t.Errorf("the middleware failed %v; the handler ran %d times for the foreign message", r.failed, r.ran(0))
	}
	if e := dbtest.Effects(t, r.db.DB); fmt.Sprint(e) != fmt.Sprint(map[int64]int{1: 1, 2: 1, 3: 1, 4: 1}) {
		t.Errorf("effects %v, want one each of 1 to 4", e)
	}
}

// TestMiddlewareStopsAtForeignMessage: with inbox.StopOnForeign, the middleware fails
// the foreign message with an error matching inbox.ErrNoKey, without running the
// handler; the router nacks it, and RabbitMQ (which requeues it at the head, the
// subscriber taking one message at a time) delivers it again and again before the
// messages behind it: the queue stops at it, and still holds it, then 2 and 3, after
// the router stopped.
func TestMiddlewareStopsAtForeignMessage(t *testing.T) {
	t.Parallel()
	r := newForeignRabbit(t)
	stop := r.run(t, watermillsink.OnForeign(inbox.StopOnForeign))
	waitFor(t, "message 1 and three refusals", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.calls[1] == 1 && len(r.failed) >= 3
	})
	stop()
	r.mu.Lock()
	for _, err := range r.failed {
		if !errors.Is(err, inbox.ErrNoKey) {
			t.Errorf("the middleware returned %v, want an error matching inbox.ErrNoKey", err)
		}
	}
	if fmt.Sprint(r.calls) != "map[1:1]" {
		t.Errorf("handler runs %v, want message 1 once and nothing behind the foreign message", r.calls)
	}
	r.mu.Unlock()
	if r.skipped() != 0 {
		t.Errorf("%d messages skipped, want none", r.skipped())
	}
	left := <-r.q.consume(t, 3, 20*time.Second)
	if len(left) != 3 || left[0].UUID != "legacy-7" || left[1].Metadata.Get(watermillsink.MetadataID) != "2" || left[2].Metadata.Get(watermillsink.MetadataID) != "3" {
		t.Errorf("the queue holds %d messages, want the foreign message, then 2 and 3", len(left))
	}
}

// TestMiddlewareDeadLettersForeignMessage: an OnForeign function receives the foreign
// message's contents (payload, metadata, UUID, the message itself, the ErrNoKey error);
// when it fails the router nacks the message and RabbitMQ delivers it again; when it
// returns nil the message is acked and does not come again.
func TestMiddlewareDeadLettersForeignMessage(t *testing.T) {
	t.Parallel()
	r := newForeignRabbit(t)
	var mu sync.Mutex
	var got []inbox.ForeignMessage
	down := errors.New("dead-letter store down")
	letters := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}
	stop := r.run(t, watermillsink.OnForeign(func(ctx context.Context, m inbox.ForeignMessage) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, m)
		if len(got) == 1 {
			return down
		}
		return nil
	}))
	waitFor(t, "messages 1 to 3 and two dead-letter calls", func() bool {
		return r.ran(1) == 1 && r.ran(2) == 1 && r.ran(3) == 1 && letters() == 2
	})
	r.send(t, 4)
	waitFor(t, "message 4", func() bool { return r.ran(4) == 1 })
	stop()
	if n := letters(); n != 2 {
		t.Errorf("the dead-letter function ran %d times, want twice (failed, then done)", n)
	}
	for i, m := range got {
		raw, _ := m.Raw.(*message.Message)
		if m.Consumer != "billing" || m.ID != "legacy-7" || string(m.Payload) != "legacy 7" || m.Headers["source"] != "legacy" ||
			!errors.Is(m.Err, inbox.ErrNoKey) || raw == nil || raw.UUID != "legacy-7" {
			t.Errorf("dead letter %d: %+v, want consumer billing, legacy-7, payload legacy 7, metadata source: legacy, ErrNoKey, the *message.Message", i, m)
		}
	}
	r.mu.Lock()
	if len(r.failed) != 1 || !errors.Is(r.failed[0], down) {
		t.Errorf("the middleware failed %v, want once with the dead-letter function's error", r.failed)
	}
	r.mu.Unlock()
	if e := dbtest.Effects(t, r.db.DB); fmt.Sprint(e) != fmt.Sprint(map[int64]int{1: 1, 2: 1, 3: 1, 4: 1}) {
		t.Errorf("effects %v, want one each of 1 to 4", e)
	}
}
