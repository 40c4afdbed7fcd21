package kafka_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/sinks/kafka"
	"github.com/outboxer-go/outboxer/sinktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cluster is an in-process Kafka cluster of three brokers (so that a batch spreads over
// several produce requests) with fault injection.
type cluster struct {
	*kfake.Cluster
	failing atomic.Int64 // produce requests still to refuse
	down    atomic.Bool  // every request closes its connection
}

func newCluster(t testing.TB, topics ...string) *cluster {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(6, topics...))
	if err != nil {
		t.Fatalf("starting the kfake cluster: %v", err)
	}
	t.Cleanup(kc.Close)
	c := &cluster{Cluster: kc}
	kc.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if c.failing.Add(-1) < 0 {
			c.failing.Add(1)
			return nil, nil, false
		}
		kc.KeepControl()
		return refuse(req.(*kmsg.ProduceRequest)), nil, true
	})
	kc.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		if !c.down.Load() {
			return nil, nil, false
		}
		kc.KeepControl()
		return nil, errors.New("broker down"), true // closes the connection
	})
	return c
}

// refuse answers a produce request with UNKNOWN_SERVER_ERROR for every partition: a
// transient broker error the client does not retry by itself.
func refuse(req *kmsg.ProduceRequest) kmsg.Response {
	return refuseTopic(req, func(kmsg.ProduceRequestTopic) bool { return true })
}

// refuseTopic answers a produce request with UNKNOWN_SERVER_ERROR for the partitions of
// the topics match says, and NOT_ENOUGH_REPLICAS (which the client retries by itself)
// for the others. Nothing is written.
func refuseTopic(req *kmsg.ProduceRequest, match func(kmsg.ProduceRequestTopic) bool) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	resp.Version = req.Version
	for _, t := range req.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition = p.Partition
			rp.ErrorCode = kerr.NotEnoughReplicas.Code
			if match(t) {
				rp.ErrorCode = kerr.UnknownServerError.Code
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// reader consumes a topic from the start with a real franz-go consumer.
type reader struct {
	mu   sync.Mutex
	cond *sync.Cond
	got  []sinktest.Received
	bad  error
}

func newReader(t testing.TB, brokers []string, topic string) *reader {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	r := &reader{}
	r.cond = sync.NewCond(&r.mu)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			var batch []sinktest.Received
			var bad error
			fs.EachRecord(func(rec *kgo.Record) {
				m, err := decode(rec)
				if err != nil {
					bad = err
				}
				batch = append(batch, m)
			})
			r.mu.Lock()
			r.got = append(r.got, batch...)
			if bad != nil && r.bad == nil {
				r.bad = bad
			}
			r.cond.Broadcast()
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return r
}

// decode turns a record written by the relay back into the envelope's fields.
func decode(rec *kgo.Record) (m sinktest.Received, err error) {
	m = sinktest.Received{GroupKey: string(rec.Key), Payload: rec.Value}
	var key string
	defer func() {
		if err == nil && m.ID != 0 && key != core.MessageKey("", core.DefaultTable, m.ID) {
			err = fmt.Errorf("record %d: %s is %q, want core.MessageKey of the row", m.ID, kafka.HeaderKey, key)
		}
	}()
	for _, h := range rec.Headers {
		switch h.Key {
		case kafka.HeaderID:
			m.ID, err = strconv.ParseInt(string(h.Value), 10, 64)
		case kafka.HeaderType:
			m.Type = string(h.Value)
		case kafka.HeaderOutbox:
			m.Outbox = string(h.Value)
		case kafka.HeaderKey:
			key = string(h.Value)
		default:
			if m.Headers == nil {
				m.Headers = map[string]string{}
			}
			m.Headers[h.Key] = string(h.Value)
		}
	}
	return m, err
}

func (r *reader) Read(ctx context.Context, n int) ([]sinktest.Received, error) {
	stop := context.AfterFunc(ctx, func() { r.mu.Lock(); r.cond.Broadcast(); r.mu.Unlock() })
	defer stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.got) < n && ctx.Err() == nil && r.bad == nil {
		r.cond.Wait()
	}
	out := append([]sinktest.Received(nil), r.got...)
	switch {
	case r.bad != nil:
		return out, r.bad
	case len(out) < n:
		return out, ctx.Err()
	}
	return out, nil
}

func newRelay(t testing.TB, cfg kafka.Config) *kafka.Relay {
	t.Helper()
	r, err := kafka.New(cfg)
	if err != nil {
		t.Fatalf("kafka.New: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

const maxRecord = 64 << 10

func TestConformance(t *testing.T) {
	sinktest.Run(t, sinktest.Harness{
		New: func(t *testing.T) *sinktest.Target {
			c := newCluster(t, "events")
			rd := newReader(t, c.ListenAddrs(), "events")
			relay := newRelay(t, kafka.Config{
				Brokers: c.ListenAddrs(),
				// The poison bound for a topic the cluster does not have goes there.
				TopicFunc: func(env core.Envelope) string {
					if bytes.Equal(env.Payload, missingTopicPayload) {
						return "no-such-topic"
					}
					return "events"
				},
				MaxRecordBytes: maxRecord,
				// Fail records for a missing topic after a few metadata lookups, not 4.
				ClientOptions: []kgo.Opt{kgo.UnknownTopicRetries(1)},
			})
			return &sinktest.Target{
				Relay:    relay,
				Read:     rd.Read,
				FailNext: func(n int) { c.failing.Add(int64(n)) },
				Stop:     func() { c.down.Store(true) },
				Start:    func() { c.down.Store(false) },
			}
		},
		MaxMessageBytes: maxRecord,
		Parallel:        true,
		DB:              func(t *testing.T) *sql.DB { return dbtest.Postgres(t).DB },
		Poisons: []sinktest.Poison{
			{
				Name:      "oversize",
				Payload:   bytes.Repeat([]byte("x"), maxRecord+1),
				Permanent: true,
				Reason:    "too large",
				By:        "sink: the relay's MaxRecordBytes check refuses it before the broker sees it",
			},
			{
				Name:    "missing-topic",
				Payload: missingTopicPayload,
				Reason:  kerr.UnknownTopicOrPartition.Message,
				By:      "broker: UNKNOWN_TOPIC_OR_PARTITION for a topic the cluster does not have (no auto-creation)",
			},
		},
		PoisonScore: func(t *testing.T, r sinktest.PoisonResult) { recordPoison(t, "kafka", r) },
	})
}

// missingTopicPayload marks the poison message the harness's relay sends to a topic
// that does not exist.
var missingTopicPayload = []byte(`{"poison":"missing topic"}`)

// recordPoison adds a run of the Poison case to the reliability scoreboard.
func recordPoison(t *testing.T, sink string, r sinktest.PoisonResult) {
	dbtest.Record(t, dbtest.Score{
		Scenario:   "7 poison message",
		Variant:    r.Poison.Name + " " + r.Variant,
		Database:   sink,
		Published:  r.Published,
		Committed:  r.Committed,
		Delivered:  r.Delivered,
		Lost:       r.Lost,
		Reordered:  r.Reordered,
		Duplicated: r.Duplicated,
		Recover:    r.Recover,
		Notes:      r.Poison.By + "; " + r.Outcome,
	})
}

func TestNewValidates(t *testing.T) {
	own, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	for _, tc := range []struct {
		name  string
		cfg   kafka.Config
		field string
	}{
		{"no topic", kafka.Config{Brokers: []string{"a:9092"}}, "Config.Topic"},
		{"both topics", kafka.Config{Brokers: []string{"a:9092"}, Topic: "t", TopicFunc: func(core.Envelope) string { return "t" }}, "Config.TopicFunc"},
		{"no brokers", kafka.Config{Topic: "t"}, "Config.Brokers"},
		{"empty broker", kafka.Config{Topic: "t", Brokers: []string{""}}, "Config.Brokers"},
		{"client and brokers", kafka.Config{Topic: "t", Client: own, Brokers: []string{"a:9092"}}, "Config.Brokers"},
		{"client and producer settings", kafka.Config{Topic: "t", Client: own, Compression: kafka.CompressionZstd}, "Config.Client"},
		{"bad compression", kafka.Config{Topic: "t", Brokers: []string{"a:9092"}, Compression: "brotli"}, "Config.Compression"},
		{"bad acks", kafka.Config{Topic: "t", Brokers: []string{"a:9092"}, Acks: 7}, "Config.Acks"},
		{"negative linger", kafka.Config{Topic: "t", Brokers: []string{"a:9092"}, Linger: -time.Millisecond}, "Config.Linger"},
		{"negative size", kafka.Config{Topic: "t", Brokers: []string{"a:9092"}, MaxRecordBytes: -1}, "Config.MaxRecordBytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := kafka.New(tc.cfg)
			if err == nil {
				_ = r.Close()
				t.Fatal("New accepted an invalid Config")
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name %s", err, tc.field)
			}
		})
	}
}

// A client the user built is used as is and left open by Close.
func TestUserClient(t *testing.T) {
	c := newCluster(t, "events")
	own, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	rd := newReader(t, c.ListenAddrs(), "events")
	relay := newRelay(t, kafka.Config{Client: own, Topic: "events"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	envs := sinktest.Envelopes(20, 3)
	if err := relay.Deliver(ctx, envs); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	if err := relay.Close(); err != nil {
		t.Fatal(err)
	}
	// The client still works after the relay was closed.
	if err := own.ProduceSync(ctx, &kgo.Record{Topic: "events", Value: []byte("after")}).FirstErr(); err != nil {
		t.Fatalf("the user's client was closed by the relay: %v", err)
	}
	got, err := rd.Read(ctx, 21)
	if err != nil {
		t.Fatal(err)
	}
	ids := 0
	for _, m := range got {
		if m.ID != 0 {
			ids++
		}
	}
	if ids != 20 {
		t.Errorf("%d relayed records arrived, want 20", ids)
	}
}

// TopicFunc routes per message; a message it gives no topic is dead, the rest go through.
func TestTopicFunc(t *testing.T) {
	c := newCluster(t, "orders", "payments")
	orders := newReader(t, c.ListenAddrs(), "orders")
	payments := newReader(t, c.ListenAddrs(), "payments")
	relay := newRelay(t, kafka.Config{Brokers: c.ListenAddrs(), TopicFunc: func(e core.Envelope) string {
		switch {
		case strings.HasPrefix(e.Type, "order"):
			return "orders"
		case strings.HasPrefix(e.Type, "payment"):
			return "payments"
		}
		return ""
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	envs := []core.Envelope{
		{ID: 1, Type: "order.Created", GroupKey: "o1", Payload: []byte("1")},
		{ID: 2, Type: "payment.Taken", GroupKey: "o1", Payload: []byte("2")},
		{ID: 3, Type: "unknown", GroupKey: "o2", Payload: []byte("3")},
		{ID: 4, Type: "order.Shipped", GroupKey: "o1", Payload: []byte("4")},
	}
	err := relay.Deliver(ctx, envs)
	var pf *core.PartialFailure
	if !errors.As(err, &pf) || len(pf.Failed) != 1 || !errors.Is(pf.Failed[3], core.ErrPermanent) {
		t.Fatalf("Deliver: %v, want a partial failure naming only message 3 as permanent", err)
	}
	o, err := orders.Read(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	p, err := payments.Read(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(o) != 2 || o[0].ID != 1 || o[1].ID != 4 || len(p) != 1 || p[0].ID != 2 {
		t.Errorf("orders got %v, payments got %v", o, p)
	}
}

// A failed message holds back the later messages of its group, even on another topic
// where Kafka took them: the relay never credits them.
func TestLaterOfFailedGroupNotCredited(t *testing.T) {
	c := newCluster(t, "a", "b")
	relay := newRelay(t, kafka.Config{Brokers: c.ListenAddrs(), TopicFunc: func(e core.Envelope) string { return e.Type }})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Warm up metadata for both topics, so the refused request carries topic a only.
	if err := relay.Deliver(ctx, []core.Envelope{{ID: 1, Type: "a", Payload: []byte("x")}, {ID: 2, Type: "b", Payload: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	// Newer produce requests name topics by ID only.
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("a")
	mreq.Topics = append(mreq.Topics, mt)
	mresp, err := mreq.RequestWith(ctx, relay.Client())
	if err != nil || len(mresp.Topics) != 1 {
		t.Fatalf("metadata of topic a: %v", err)
	}
	idA := mresp.Topics[0].TopicID
	isA := func(t kmsg.ProduceRequestTopic) bool { return t.Topic == "a" || (t.Topic == "" && t.TopicID == idA) }
	var refused atomic.Bool
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		pr := req.(*kmsg.ProduceRequest)
		for _, t := range pr.Topics {
			if isA(t) && !refused.Swap(true) {
				return refuseTopic(pr, isA), nil, true
			}
		}
		return nil, nil, false
	})
	envs := []core.Envelope{
		{ID: 10, Type: "b", GroupKey: "k2", Payload: []byte("x")},
		{ID: 11, Type: "a", GroupKey: "k", Payload: []byte("x")},
		{ID: 12, Type: "b", GroupKey: "k", Payload: []byte("x")},
	}
	err = relay.Deliver(ctx, envs)
	var pf *core.PartialFailure
	if !errors.As(err, &pf) {
		t.Fatalf("Deliver: %v, want a partial failure", err)
	}
	if !refused.Load() {
		t.Fatal("no produce request to topic a was refused")
	}
	if _, ok := pf.Failed[11]; !ok {
		t.Errorf("message 11 (refused) not named: %v", pf.Failed)
	}
	if _, ok := pf.Failed[12]; !ok {
		t.Errorf("message 12, after failed message 11 of group k, was credited: %v", pf.Failed)
	}
	if _, ok := pf.Failed[10]; ok {
		t.Errorf("message 10 of another group was named: %v", pf.Failed)
	}
}
