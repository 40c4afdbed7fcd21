package kafka_test

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

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
	"github.com/outboxer-go/outboxer/sinks/kafka"
)

func recordID(rec *kgo.Record) int64 {
	for _, h := range rec.Headers {
		if h.Key == kafka.HeaderID {
			id, _ := strconv.ParseInt(string(h.Value), 10, 64)
			return id
		}
	}
	return 0
}

func groupClient(t testing.TB, brokers []string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup("billing"), kgo.ConsumeTopics("orders"),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// kafkaRelay starts a kfake cluster with the topic "orders" and a relay to it, both
// closed when the test ends.
func kafkaRelay(t testing.TB) (*kfake.Cluster, *kafka.Relay) {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	relay, err := kafka.New(kafka.Config{Brokers: kc.ListenAddrs(), Topic: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	return kc, relay
}

func deliver(t *testing.T, relay *kafka.Relay, ids ...int64) {
	t.Helper()
	var batch []core.Envelope
	for _, id := range ids {
		batch = append(batch, core.Envelope{ID: id, Outbox: "orders", Type: "order.placed", GroupKey: "customer-1", Payload: []byte(`{}`)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := relay.Deliver(ctx, batch); err != nil {
		t.Fatalf("Deliver %v: %v", ids, err)
	}
}

// TestConsumerRunsEachRecordOnce: records delivered again by Kafka (a consumer that
// handled them and was restarted before committing offsets) and by the relay (a batch
// delivered twice) run the handler once; a handler error rolls back its write, Run
// returns it without committing the record's offset, and the next consumer of the group
// receives the record again and runs it.
func TestConsumerRunsEachRecordOnce(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		in := dbtest.ConsumerInbox(t, db)
		kc, relay := kafkaRelay(t)
		deliver(t, relay, 1, 2, 3, 4, 5)
		deliver(t, relay, 3, 4) // the relay delivers a batch again
		deliver(t, relay, 6)

		var mu sync.Mutex
		calls := map[int64]int{}
		boom := errors.New("boom")
		failFive := true
		handler := func(ctx context.Context, tx *sql.Tx, rec *kgo.Record, o inbox.Outcome) error {
			id := recordID(rec)
			mu.Lock()
			calls[id]++
			fail := id == 5 && failFive
			mu.Unlock()
			if _, err := tx.ExecContext(ctx, fmt.Sprintf(`INSERT INTO effects (id) VALUES (%d)`, id)); err != nil {
				return err
			}
			if fail {
				return boom // after the write: the rollback must undo it
			}
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()

		// A: handles records 1 and 2 and dies before committing any offset.
		a := groupClient(t, kc.ListenAddrs())
		handled := 0
		ca, err := kafka.NewConsumer(kafka.ConsumerConfig{Client: a, Inbox: in, Name: "billing", Handler: handler})
		if err != nil {
			t.Fatal(err)
		}
		for handled < 2 && ctx.Err() == nil {
			a.PollFetches(ctx).EachRecord(func(rec *kgo.Record) {
				if handled < 2 {
					if o, err := ca.HandleRecord(ctx, rec); err != nil || o != inbox.Claimed {
						t.Errorf("A: record %d: %v, %v", recordID(rec), o, err)
					}
					handled++
				}
			})
		}
		a.Close()

		// B: Kafka gives it 1 and 2 again (duplicates), 3 and 4 run, 5 fails.
		b := groupClient(t, kc.ListenAddrs())
		cb, err := kafka.NewConsumer(kafka.ConsumerConfig{Client: b, Inbox: in, Name: "billing", Handler: handler})
		if err != nil {
			t.Fatal(err)
		}
		if err := cb.Run(ctx); !errors.Is(err, boom) {
			t.Fatalf("B's Run returned %v, want the handler's error", err)
		}
		b.Close()
		if got := dbtest.Effects(t, db.DB); len(got) != 4 || got[5] != 0 {
			t.Fatalf("after B: effects %v, want 1-4 once and 5's write rolled back", got)
		}

		// C: receives 5 again (its offset was not committed), then the relay's
		// duplicates of 3 and 4, then 6.
		mu.Lock()
		failFive = false
		mu.Unlock()
		c := groupClient(t, kc.ListenAddrs())
		defer c.Close()
		cc, err := kafka.NewConsumer(kafka.ConsumerConfig{Client: c, Inbox: in, Name: "billing", Handler: handler})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		ran := make(chan error, 1)
		go func() { ran <- cc.Run(runCtx) }()
		for dbtest.Effects(t, db.DB)[6] == 0 && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		stop()
		if err := <-ran; err != nil {
			t.Fatalf("C's Run: %v", err)
		}
		got := dbtest.Effects(t, db.DB)
		for id := int64(1); id <= 6; id++ {
			if got[id] != 1 {
				t.Errorf("effect of record %d committed %d times, want 1 (effects %v)", id, got[id], got)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		want := map[int64]int{1: 1, 2: 1, 3: 1, 4: 1, 5: 2, 6: 1}
		for id, n := range want {
			if calls[id] != n {
				t.Errorf("handler ran %d times for record %d, want %d (calls %v)", calls[id], id, n, calls)
			}
		}
	})
}

// TestNewConsumerValidates: a client that commits by itself, or outside a group, is refused.
func TestNewConsumerValidates(t *testing.T) {
	db := dbtest.SQLite(t)
	in := dbtest.ConsumerInbox(t, db)
	h := func(context.Context, *sql.Tx, *kgo.Record, inbox.Outcome) error { return nil }
	auto, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer auto.Close()
	noGroup, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), kgo.ConsumeTopics("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer noGroup.Close()
	for _, cfg := range []kafka.ConsumerConfig{
		{Client: auto, Inbox: in, Name: "billing", Handler: h},
		{Client: noGroup, Inbox: in, Name: "billing", Handler: h},
		{Client: auto, Inbox: in, Handler: h},
		{Client: auto, Name: "billing", Handler: h},
	} {
		if _, err := kafka.NewConsumer(cfg); err == nil {
			t.Errorf("NewConsumer(%+v) accepted it", cfg)
		}
	}
	// A record without a key is refused before anything runs.
	if _, err := kafka.MessageOf(&kgo.Record{Topic: "t"}); !errors.Is(err, inbox.ErrNoKey) {
		t.Errorf("MessageOf(record without a key) = %v, want inbox.ErrNoKey", err)
	}
}

// BenchmarkConsumer measures a franz-go consumer's throughput on kfake: each record's
// handler writes one row in a transaction, without the inbox (a hand-written loop:
// begin, insert, commit, then commit the fetch's offsets) and with Consumer.Run (the
// claim first in the same transaction).
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
				kc, relay := kafkaRelay(b)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				for i := 0; i < b.N; i += 500 {
					var batch []core.Envelope
					for j := i; j < min(b.N, i+500); j++ {
						batch = append(batch, core.Envelope{ID: int64(j + 1), Outbox: "orders", Type: "order.placed", Payload: []byte(`{}`)})
					}
					if err := relay.Deliver(ctx, batch); err != nil {
						b.Fatal(err)
					}
				}
				client := groupClient(b, kc.ListenAddrs())
				defer client.Close()
				var handled atomic.Int64
				write := func(ctx context.Context, tx *sql.Tx, rec *kgo.Record) error {
					_, err := tx.ExecContext(ctx, fmt.Sprintf(`INSERT INTO effects (id) VALUES (%d)`, recordID(rec)))
					return err
				}
				b.ResetTimer()
				if withInbox {
					runCtx, stop := context.WithCancel(ctx)
					c, err := kafka.NewConsumer(kafka.ConsumerConfig{Client: client, Inbox: in, Name: "billing",
						Handler: func(ctx context.Context, tx *sql.Tx, rec *kgo.Record, _ inbox.Outcome) error {
							if err := write(ctx, tx, rec); err != nil {
								return err
							}
							if handled.Add(1) == int64(b.N) {
								stop() // Run returns after this fetch's records
							}
							return nil
						}})
					if err != nil {
						b.Fatal(err)
					}
					if err := c.Run(runCtx); err != nil {
						b.Fatal(err)
					}
				} else {
					for handled.Load() < int64(b.N) && ctx.Err() == nil {
						fs := client.PollFetches(ctx)
						for _, rec := range fs.Records() {
							tx, err := db.BeginTx(ctx, nil)
							if err != nil {
								b.Fatal(err)
							}
							if err := write(ctx, tx, rec); err != nil {
								b.Fatal(err)
							}
							if err := tx.Commit(); err != nil {
								b.Fatal(err)
							}
							handled.Add(1)
						}
						if err := client.CommitRecords(ctx, fs.Records()...); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.StopTimer()
				if n := handled.Load(); n != int64(b.N) {
					b.Fatalf("handled %d of %d records", n, b.N)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}
