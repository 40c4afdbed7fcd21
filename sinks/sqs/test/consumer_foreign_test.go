package sqs_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
	outboxsqs "github.com/outboxer-go/outboxer/sinks/sqs"
)

// foreignQueue is a queue (visibility timeout 1 s) holding outbox messages 1, 2 and 3
// and, sent between them, a message of another producer (no outboxer-key; body
// "legacy 7", attribute source: legacy), with the consumer's inbox on a fresh SQLite
// database.
type foreignQueue struct {
	queue   string
	foreign string // the foreign message's ID
	relay   core.Relay
	db      *dbtest.DB
	in      *inbox.Inbox

	mu    sync.Mutex
	calls map[int64]int
}

func newForeignQueue(t *testing.T) *foreignQueue {
	t.Helper()
	needEmulator(t)
	q := &foreignQueue{db: dbtest.SQLite(t), calls: map[int64]int{}}
	q.in = dbtest.ConsumerInbox(t, q.db)
	q.queue = newQueueWith(t, false, map[string]string{"VisibilityTimeout": "1"})
	q.relay = newRelay(t, outboxsqs.Config{Client: newClient(endpoint), QueueURL: q.queue, Ordering: core.OrderNone})
	q.send(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := newClient(endpoint).SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &q.queue, MessageBody: aws.String("legacy 7"),
		MessageAttributes: map[string]types.MessageAttributeValue{"source": {DataType: aws.String("String"), StringValue: aws.String("legacy")}}})
	if err != nil {
		t.Fatal(err)
	}
	q.foreign = aws.ToString(out.MessageId)
	q.send(t, 2, 3)
	return q
}

func (q *foreignQueue) send(t *testing.T, ids ...int64) {
	t.Helper()
	var batch []core.Envelope
	for _, id := range ids {
		batch = append(batch, core.Envelope{ID: id, Outbox: "orders", Type: "order.placed", Payload: []byte(`{}`)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := q.relay.Deliver(ctx, batch); err != nil {
		t.Fatalf("Deliver %v: %v", ids, err)
	}
}

func (q *foreignQueue) handle(ctx context.Context, tx *sql.Tx, m types.Message, _ inbox.Outcome) error {
	q.mu.Lock()
	q.calls[messageID(m)]++
	q.mu.Unlock()
	_, err := tx.ExecContext(ctx, `INSERT INTO effects (id) VALUES (?)`, messageID(m))
	return err
}

func (q *foreignQueue) ran(id int64) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.calls[id]
}

func (q *foreignQueue) consumer(t *testing.T, logger *slog.Logger, onForeign inbox.ForeignPolicy) *outboxsqs.Consumer {
	t.Helper()
	c, err := outboxsqs.NewConsumer(outboxsqs.ConsumerConfig{Client: newClient(endpoint), QueueURL: q.queue, Inbox: q.in, Name: "billing",
		Handler: q.handle, WaitTime: time.Second, Logger: logger, OnForeign: onForeign})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runUntil runs c until done reports true (polled), then cancels Run; it fails the
// test when Run returns before that or done is not reached in 30 s.
func (q *foreignQueue) runUntil(t *testing.T, c *outboxsqs.Consumer, done func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !done() {
		select {
		case err := <-ran:
			t.Fatalf("Run returned %v before the messages were handled (handler runs %v)", err, q.calls)
		case <-tick.C:
		}
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run = %v, want nil when its context ends", err)
	}
}

// TestConsumerSkipsForeignMessagesByDefault: without OnForeign, a message of another
// producer is deleted from the queue with a warning to the consumer's logger, and the
// outbox messages around it are handled once each; a consumer started afterwards does
// not meet it again.
func TestConsumerSkipsForeignMessagesByDefault(t *testing.T) {
	t.Parallel()
	q := newForeignQueue(t)
	logs, logger := dbtest.NewLogs()
	skipped := func() int { return len(logs.Lines(slog.LevelWarn, "without a key")) }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q.runUntil(t, q.consumer(t, logger, nil), func() bool {
		return q.ran(1) == 1 && q.ran(2) == 1 && q.ran(3) == 1 && skipped() == 1 && queueEmpty(t, ctx, q.queue)
	})
	if l := logs.Lines(slog.LevelWarn, "without a key"); len(l) != 1 || l[0].Attrs["consumer"] != "billing" || l[0].Attrs["message"] != q.foreign {
		t.Errorf("warnings %v, want one naming consumer billing and message %s\n%s", l, q.foreign, logs)
	}
	if e := logs.Lines(slog.LevelError, ""); len(e) != 0 {
		t.Errorf("errors logged: %v", e)
	}

	q.send(t, 4)
	q.runUntil(t, q.consumer(t, logger, nil), func() bool { return q.ran(4) == 1 && queueEmpty(t, ctx, q.queue) })
	if n := skipped(); n != 1 {
		t.Errorf("the foreign message was skipped %d times, want once\n%s", n, logs)
	}
	if e := dbtest.Effects(t, q.db.DB); fmt.Sprint(e) != fmt.Sprint(map[int64]int{1: 1, 2: 1, 3: 1, 4: 1}) {
		t.Errorf("effects %v, want one each of 1 to 4", e)
	}
}

// TestConsumerStopsAtForeignMessage: with inbox.StopOnForeign, Run returns an error
// matching inbox.ErrNoKey when it meets the foreign message and leaves it in the
// queue, where it is received again; a consumer with the default policy then takes the
// queue to the end, each outbox message handled once.
func TestConsumerStopsAtForeignMessage(t *testing.T) {
	t.Parallel()
	q := newForeignQueue(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := q.consumer(t, nil, inbox.StopOnForeign).Run(ctx)
	if !errors.Is(err, inbox.ErrNoKey) {
		t.Fatalf("Run = %v, want an error matching inbox.ErrNoKey", err)
	}
	var found bool
	for !found && ctx.Err() == nil {
		out, err := newClient(endpoint).ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &q.queue, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			found = found || aws.ToString(m.MessageId) == q.foreign
		}
	}
	if !found {
		t.Fatal("the foreign message is no longer in the queue")
	}

	logs, logger := dbtest.NewLogs()
	q.runUntil(t, q.consumer(t, logger, nil), func() bool {
		return q.ran(1) == 1 && q.ran(2) == 1 && q.ran(3) == 1 && len(logs.Lines(slog.LevelWarn, "without a key")) == 1 && queueEmpty(t, ctx, q.queue)
	})
	if e := dbtest.Effects(t, q.db.DB); fmt.Sprint(e) != fmt.Sprint(map[int64]int{1: 1, 2: 1, 3: 1}) {
		t.Errorf("effects %v, want one each of 1, 2, 3", e)
	}
}

// TestConsumerDeadLettersForeignMessage: an OnForeign function receives the foreign
// message's contents (body, attributes, ID, the message itself, the ErrNoKey error);
// when it fails, Run logs the error and goes on, and SQS delivers the message again
// after its visibility timeout; when it returns nil, the message is deleted.
func TestConsumerDeadLettersForeignMessage(t *testing.T) {
	t.Parallel()
	q := newForeignQueue(t)
	var mu sync.Mutex
	var got []inbox.ForeignMessage
	down := errors.New("dead-letter store down")
	deadLetter := func(ctx context.Context, m inbox.ForeignMessage) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, m)
		if len(got) == 1 {
			return down
		}
		return nil
	}
	letters := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}
	logs, logger := dbtest.NewLogs()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q.runUntil(t, q.consumer(t, logger, deadLetter), func() bool {
		return q.ran(1) == 1 && q.ran(2) == 1 && q.ran(3) == 1 && letters() == 2 && queueEmpty(t, ctx, q.queue)
	})
	for i, m := range got {
		raw, _ := m.Raw.(types.Message)
		if m.Consumer != "billing" || m.ID != q.foreign || string(m.Payload) != "legacy 7" ||
			fmt.Sprint(m.Headers) != "map[source:legacy]" || !errors.Is(m.Err, inbox.ErrNoKey) || aws.ToString(raw.Body) != "legacy 7" {
			t.Errorf("dead letter %d: %+v, want consumer billing, message %s, legacy 7, attribute source: legacy, ErrNoKey, the types.Message", i, m, q.foreign)
		}
	}
	if l := logs.Lines(slog.LevelError, "stays in the queue"); len(l) != 1 || l[0].Attrs["err"] != down.Error() {
		t.Errorf("errors logged %v, want one with the dead-letter function's error\n%s", l, logs)
	}
	if e := dbtest.Effects(t, q.db.DB); fmt.Sprint(e) != fmt.Sprint(map[int64]int{1: 1, 2: 1, 3: 1}) {
		t.Errorf("effects %v, want one each of 1, 2, 3", e)
	}
}
