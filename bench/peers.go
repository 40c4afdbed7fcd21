package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// watermillPollInterval is the SQL subscriber's idle poll, lowered from its 1 s default:
// it has no other wake-up.
const watermillPollInterval = 10 * time.Millisecond

// countingPublisher is the forwarder's destination: the counting sink.
type countingPublisher struct{ s *sink }

func (p countingPublisher) Publish(_ string, msgs ...*message.Message) error {
	for _, m := range msgs {
		p.s.accept(m.Payload)
	}
	return nil
}

func (countingPublisher) Close() error { return nil }

func watermillMessages(seq int64, k int) []*message.Message {
	msgs := make([]*message.Message, k)
	for i := range k {
		s := seq + int64(i)
		m := message.NewMessage(watermill.NewUUID(), payload(s))
		m.Metadata.Set("group_key", groupKey(s))
		msgs[i] = m
	}
	return msgs
}

// watermillForwarder: the watermill-sql PostgreSQL publisher inside the business
// transaction, wrapped by the forwarder's publisher; the forwarder component reads the
// table with the SQL subscriber (DefaultPostgreSQLSchema, read batch o.batch) and
// forwards to the counting publisher.
func watermillForwarder(ctx context.Context, e *env, s *sink, o opts) (*runner, error) {
	schema := wsql.DefaultPostgreSQLSchema{SubscribeBatchSize: o.batch}
	logger := watermill.NopLogger{}
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromStdSQL(e.db), wsql.SubscriberConfig{
		SchemaAdapter:    schema,
		OffsetsAdapter:   wsql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true,
		PollInterval:     watermillPollInterval,
	}, logger)
	if err != nil {
		return nil, err
	}
	const topic = "forwarder_topic"
	if err := sub.SubscribeInitialize(topic); err != nil {
		return nil, err
	}
	r := &runner{table: "watermill_" + topic}
	r.publish = func(ctx context.Context, seq int64, k int, lat *latencies) error {
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := insertOrder(ctx, tx, e.dialect, seq); err != nil {
			return err
		}
		pub, err := wsql.NewPublisher(wsql.TxFromStdSQL(tx), wsql.PublisherConfig{SchemaAdapter: schema}, logger)
		if err != nil {
			return err
		}
		if err := forwarder.NewPublisher(pub, forwarder.PublisherConfig{}).Publish("orders", watermillMessages(seq, k)...); err != nil {
			return err
		}
		if lat != nil {
			lat.committing(seq)
		}
		return tx.Commit()
	}
	r.seed = func(ctx context.Context, n int) error {
		pub, err := wsql.NewPublisher(wsql.BeginnerFromStdSQL(e.db), wsql.PublisherConfig{SchemaAdapter: schema}, logger)
		if err != nil {
			return err
		}
		fp := forwarder.NewPublisher(pub, forwarder.PublisherConfig{})
		for i := 0; i < n; i += 1000 {
			if err := fp.Publish("orders", watermillMessages(int64(i), min(1000, n-i))...); err != nil {
				return err
			}
		}
		return nil
	}
	r.start = func(ctx context.Context) (func(), error) {
		f, err := forwarder.NewForwarder(sub, countingPublisher{s}, logger, forwarder.Config{})
		if err != nil {
			return nil, err
		}
		done := make(chan error, 1)
		go func() { done <- f.Run(ctx) }()
		select {
		case <-f.Running():
		case err := <-done:
			return nil, fmt.Errorf("forwarder: %v", err)
		case <-time.After(30 * time.Second):
			return nil, fmt.Errorf("forwarder did not start within 30s")
		}
		return func() {
			_ = f.Close()
			<-done
		}, nil
	}
	return r, nil
}

// riverArgs carries the 256-byte payload. River stores arguments as jsonb, which
// rewrites JSON text, so the payload travels as a string and the sequence number beside it.
type riverArgs struct {
	Seq  int64  `json:"seq"`
	Data string `json:"data"`
}

func (riverArgs) Kind() string { return "bench_order_placed" }

type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	s *sink
}

func (w *riverWorker) Work(_ context.Context, job *river.Job[riverArgs]) error {
	if w.s.lat != nil {
		w.s.acceptSeq(job.Args.Seq)
	} else {
		w.s.acceptSeq(-1)
	}
	return nil
}

func riverInserts(seq int64, k int) []river.InsertManyParams {
	ps := make([]river.InsertManyParams, k)
	for i := range k {
		s := seq + int64(i)
		ps[i] = river.InsertManyParams{Args: riverArgs{Seq: s, Data: string(payload(s))}}
	}
	return ps
}

// riverQueue: River with its pgx v5 driver and its own tables (rivermigrate) in the run's
// schema; InsertTx inside the business transaction, a worker calling the counting sink.
// FetchCooldown is at River's documented minimum (1 ms; it bounds throughput).
func riverQueue(ctx context.Context, e *env, s *sink, o opts) (*runner, error) {
	driver := riverpgxv5.New(e.pool)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: e.schema, Logger: quiet})
	if err != nil {
		return nil, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("river migrate: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverWorker{s: s})
	client, err := river.NewClient(driver, &river.Config{
		Schema:        e.schema,
		Logger:        quiet,
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: max(o.workers, 1)}},
		Workers:       workers,
		FetchCooldown: time.Millisecond,
	})
	if err != nil {
		return nil, err
	}
	r := &runner{table: "river_job"}
	r.publish = func(ctx context.Context, seq int64, k int, lat *latencies) error {
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `INSERT INTO orders (customer, total) VALUES ($1, $2)`, groupKey(seq), seq); err != nil {
			return err
		}
		if k == 1 {
			if _, err := client.InsertTx(ctx, tx, riverArgs{Seq: seq, Data: string(payload(seq))}, nil); err != nil {
				return err
			}
		} else if k > 1 {
			if _, err := client.InsertManyTx(ctx, tx, riverInserts(seq, k)); err != nil {
				return err
			}
		}
		if lat != nil {
			lat.committing(seq)
		}
		return tx.Commit(ctx)
	}
	r.seed = func(ctx context.Context, n int) error {
		for i := 0; i < n; i += 5000 {
			if _, err := client.InsertManyFast(ctx, riverInserts(int64(i), min(5000, n-i))); err != nil {
				return err
			}
		}
		return nil
	}
	r.start = func(ctx context.Context) (func(), error) {
		if err := client.Start(ctx); err != nil {
			return nil, err
		}
		return func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := client.Stop(sctx); err != nil {
				logf("river: stop: %v", err)
			}
		}, nil
	}
	return r, nil
}
