package kafka_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
	"github.com/outboxer-go/outboxer/sinks/kafka"
)

// foreignTopic starts a cluster whose topic "orders" holds outbox record 1, a record of
// another producer (no outboxer-key, a header "source: legacy", value "legacy 7"), and
// outbox records 2 and 3, in that order in its one partition; it returns the cluster,
// the relay and the consumer's inbox (logging to logs) on a fresh SQLite database.
func foreignTopic(t *testing.T, logger *slog.Logger) (*kfake.Cluster, *kafka.Relay, *dbtest.DB, *inbox.Inbox) {
	t.Helper()
	db := dbtest.SQLite(t)
	in, err := inbox.New(inbox.Config{DB: db.DB, Dialect: db.Dialect, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE effects (id BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	kc, relay := kafkaRelay(t)
	deliver(t, relay, 1)
	prod, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.DefaultProduceTopic("orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec := &kgo.Record{Value: []byte("legacy 7"), Headers: []kgo.RecordHeader{{Key: "source", Value: []byte("legacy")}}}
	if err := prod.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	deliver(t, relay, 2, 3)
	return kc, relay, db, in
}

// effectsHandler writes each record's effect and counts the handler's runs per ID.
type effectsHandler struct {
	mu    sync.Mutex
	calls map[int64]int
}

func (h *effectsHandler) handle(ctx context.Context, tx *sql.Tx, rec *kgo.Record, _ inbox.Outcome) error {
	h.mu.Lock()
	if h.calls == nil {
		h.calls = map[int64]int{}
	}
	h.calls[recordID(rec)]++
	h.mu.Unlock()
	_, err := tx.ExecContext(ctx, `INSERT INTO effects (id) VALUES (?)`, recordID(rec))
	return err
}

func (h *effectsHandler) ran(id int64) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[id]
}

// committedOffset returns the offset the group "billing" committed for orders/0, or
// -1 when it committed none.
func committedOffset(t *testing.T, brokers []string) func() int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return func() int64 {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Group = "billing"
		topic := kmsg.NewOffsetFetchRequestTopic()
		topic.Topic, topic.Partitions = "orders", []int32{0}
		req.Topics = append(req.Topics, topic)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Errorf("offset fetch: %v", err)
			return -1
		}
		for _, rt := range resp.Topics {
			for _, p := range rt.Partitions {
				return p.Offset
			}
		}
		for _, g := range resp.Groups {
			for _, rt := range g.Topics {
				for _, p := range rt.Partitions {
					return p.Offset
				}
			}
		}
		return -1
	}
}

// runUntil runs c until done reports true (polled), then cancels Run and returns its
// result; it fails the test when Run returns before that.
func runUntil(t *testing.T, c *kafka.Consumer, done func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !done() {
		select {
		case err := <-ran:
			t.Fatalf("Run returned %v before the records were handled", err)
		case <-tick.C:
		}
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run = %v, want nil when its context ends", err)
	}
}

// TestConsumerSkipsForeignRecordsByDefault: without OnForeign, a record of another
// producer between outbox records is skipped with a warning to the inbox's logger,
// and Run commits past it: the outbox records behind it are handled once each, and
// the group's next consumer, started after the first, neither meets the foreign
// record again nor handles the first's records again.
func TestConsumerSkipsForeignRecordsByDefault(t *testing.T) {
	t.Parallel()
	logs, logger := dbtest.NewLogs()
	kc, relay, db, in := foreignTopic(t, logger)
	skipped := func() int { return len(logs.Lines(slog.LevelWarn, "without a key")) }
	committed := committedOffset(t, kc.ListenAddrs())
	h := &effectsHandler{}

	cl := groupClient(t, kc.ListenAddrs())
	c, err := kafka.NewConsumer(kafka.ConsumerConfig{Client: cl, Inbox: in, Name: "billing", Handler: h.handle})
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, c, func() bool { return h.ran(3) == 1 && skipped() == 1 && committed() == 4 })
	cl.Close()
	if l := logs.Lines(slog.LevelWarn, "without a key"); len(l) != 1 || l[0].Attrs["consumer"] != "billing" || l[0].Attrs["message"] != "orders/0@1" {
		t.Errorf("warnings %v, want one naming consumer billing and orders/0@1\n%s", l, logs)
	}

	// The next consumer of the group starts after the committed offsets.
	deliver(t, relay, 4)
	cl = groupClient(t, kc.ListenAddrs())
	defer cl.Close()
	c, err = kafka.NewConsumer(kafka.ConsumerConfig{Client: cl, Inbox: in, Name: "billing", Handler: h.handle})
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, c, func() bool { return h.ran(4) == 1 })
	if n := skipped(); n != 1 {
		t.Errorf("the foreign record was skipped %d times, want once (the restarted consumer met it again)\n%s", n, logs)
	}
	for id := int64(1); id <= 4; id++ {
		if h.ran(id) != 1 {
			t.Errorf("record %d handled %d times, want once (%v)", id, h.ran(id), h.calls)
		}
	}
	if e := dbtest.Effects(t, db.DB); fmt.Sprint(e) != fmt.Sprint(map[int64]int{1: 1, 2: 1, 3: 1, 4: 1}) {
		t.Errorf("effects %v, want one each of 1 to 4", e)
	}
}

// TestConsumerStopsAtForeignRecord: with inbox.StopOnForeign, Run handles and commits
// the record before the foreign one and returns an error matching inbox.ErrNoKey; the
// group's next consumer stops at it again, and the records behind it wait.
func TestConsumerStopsAtForeignRecord(t *testing.T) {
	t.Parallel()
	kc, _, db, in := foreignTopic(t, nil)
	h := &effectsHandler{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for round := range 2 {
		cl := groupClient(t, kc.ListenAddrs())
		c, err := kafka.NewConsumer(kafka.ConsumerConfig{Client: cl, Inbox: in, Name: "billing", Handler: h.handle, OnForeign: inbox.StopOnForeign})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Run(ctx); !errors.Is(err, inbox.ErrNoKey) {
			t.Fatalf("round %d: Run = %v, want an error matching inbox.ErrNoKey", round, err)
		}
		cl.Close()
	}
	if h.ran(1) != 1 || h.ran(2) != 0 || h.ran(3) != 0 {
		t.Errorf("handler runs %v, want record 1 once and none of the records behind the foreign one", h.calls)
	}
	if e := dbtest.Effects(t, db.DB); len(e) != 1 || e[1] != 1 {
		t.Errorf("effects %v, want only record 1's", e)
	}
}

// TestConsumerDeadLettersForeignRecord: an OnForeign function receives the foreign
// record's contents (value, headers, position, the record itself, the ErrNoKey error)
// once, and the consumer commits past it when it returns nil; when it returns an error
// (the dead-letter store is down), Run returns that error without committing the
// record, and the group's next consumer hands the record to it again.
func TestConsumerDeadLettersForeignRecord(t *testing.T) {
	t.Parallel()
	kc, _, db, in := foreignTopic(t, nil)
	h := &effectsHandler{}
	var mu sync.Mutex
	var got []inbox.ForeignMessage
	down := errors.New("dead-letter store down")
	fail := true
	deadLetter := func(ctx context.Context, m inbox.ForeignMessage) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, m)
		if fail {
			return down
		}
		return nil
	}
	letters := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}

	// The dead-letter store fails: Run stops at the record.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := groupClient(t, kc.ListenAddrs())
	c, err := kafka.NewConsumer(kafka.ConsumerConfig{Client: cl, Inbox: in, Name: "billing", Handler: h.handle, OnForeign: deadLetter})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); !errors.Is(err, down) {
		t.Fatalf("Run = %v, want the dead-letter function's error", err)
	}
	cl.Close()

	// It works again: the next consumer dead-letters the record and goes on.
	mu.Lock()
	fail = false
	mu.Unlock()
	cl = groupClient(t, kc.ListenAddrs())
	defer cl.Close()
	c, err = kafka.NewConsumer(kafka.ConsumerConfig{Client: cl, Inbox: in, Name: "billing", Handler: h.handle, OnForeign: deadLetter})
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, c, func() bool { return h.ran(3) == 1 })
	if letters() != 2 {
		t.Fatalf("the dead-letter function ran %d times, want twice (failed, then done)", letters())
	}
	for i, m := range got {
		rec, _ := m.Raw.(*kgo.Record)
		if m.Consumer != "billing" || m.ID != "orders/0@1" || string(m.Payload) != "legacy 7" ||
			fmt.Sprint(m.Headers) != "map[source:legacy]" || !errors.Is(m.Err, inbox.ErrNoKey) ||
			rec == nil || string(rec.Value) != "legacy 7" {
			t.Errorf("dead letter %d: %+v, want consumer billing, orders/0@1, legacy 7, header source: legacy, ErrNoKey, the *kgo.Record", i, m)
		}
	}
	if h.ran(1) != 1 || h.ran(2) != 1 || h.ran(3) != 1 {
		t.Errorf("handler runs %v, want one for each of 1, 2, 3", h.calls)
	}
	if e := dbtest.Effects(t, db.DB); len(e) != 3 {
		t.Errorf("effects %v, want one each of 1, 2, 3", e)
	}
}
