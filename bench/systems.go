package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/outboxer-go/outboxer/core"
)

// opts tune one run of a system.
type opts struct {
	batch      int  // read batch size
	partitions int  // ours: partitions
	notify     bool // ours: LISTEN/NOTIFY
	sameInst   bool // ours: publish through the delivering instance (in-process wake-up)
	workers    int  // River: MaxWorkers
}

// runner is one system set up on one database: it publishes inside business
// transactions, seeds a backlog and delivers to the sink.
type runner struct {
	// publish runs one business transaction (an order row) with k messages, the first
	// numbered seq; with lat set, it notes the time just before commit.
	publish func(ctx context.Context, seq int64, k int, lat *latencies) error
	// seed stores n pending messages outside any business transaction.
	seed func(ctx context.Context, n int) error
	// start begins delivering to the sink; stop ends it.
	start func(ctx context.Context) (stop func(), err error)
	// table holding the messages, for size samples.
	table string
}

type factory func(ctx context.Context, e *env, s *sink, o opts) (*runner, error)

var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

const groups = 16

func groupKey(seq int64) string { return "customer:" + strconv.FormatInt(seq%groups, 10) }

func insertOrder(ctx context.Context, tx *sql.Tx, d core.Dialect, seq int64) error {
	q := `INSERT INTO orders (customer, total) VALUES ($1, $2)`
	if d == core.SQLite {
		q = `INSERT INTO orders (customer, total) VALUES (?, ?)`
	}
	_, err := tx.ExecContext(ctx, q, groupKey(seq), seq)
	return err
}

// bareSQL is the business transaction alone, through database/sql.
func bareSQL(_ context.Context, e *env, _ *sink, _ opts) (*runner, error) {
	return &runner{publish: func(ctx context.Context, seq int64, _ int, _ *latencies) error {
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := insertOrder(ctx, tx, e.dialect, seq); err != nil {
			return err
		}
		return tx.Commit()
	}}, nil
}

// bareSQL is the business transaction alone, through a pgx pool (River's driver).
func barePgx(_ context.Context, e *env, _ *sink, _ opts) (*runner, error) {
	return &runner{publish: func(ctx context.Context, seq int64, _ int, _ *latencies) error {
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `INSERT INTO orders (customer, total) VALUES ($1, $2)`, groupKey(seq), seq); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}}, nil
}

func oursMessages(seq int64, k int) []core.Message {
	msgs := make([]core.Message, k)
	for i := range k {
		s := seq + int64(i)
		msgs[i] = core.Raw{To: "bench", Type: "order.placed", Key: groupKey(s), Data: payload(s)}
	}
	return msgs
}

// ours is the engine: a delivering instance and, unless sameInst, a publish-only one
// that publishes (as another process would: no in-process wake-up).
func ours(ctx context.Context, e *env, s *sink, o opts) (*runner, error) {
	if err := core.Migrate(ctx, e.db, core.MigrateOptions{Dialect: e.dialect}); err != nil {
		return nil, err
	}
	relay := core.RelayFunc(func(_ context.Context, batch []core.Envelope) error {
		for i := range batch {
			s.accept(batch[i].Payload)
		}
		return nil
	})
	box := core.OutboxConfig{Relay: relay, Partitions: max(o.partitions, 1), BatchSize: o.batch}
	relayer, err := core.New(core.Config{DB: e.db, Dialect: e.dialect, Notify: o.notify, Logger: quiet,
		Outboxes: map[string]core.OutboxConfig{"bench": box}})
	if err != nil {
		return nil, err
	}
	pubBox := box
	pubBox.Relay = nil
	publisher := relayer
	if !o.sameInst {
		if publisher, err = core.New(core.Config{DB: e.db, Dialect: e.dialect, Notify: o.notify, Logger: quiet, PublishOnly: true,
			Outboxes: map[string]core.OutboxConfig{"bench": pubBox}}); err != nil {
			return nil, err
		}
	}
	r := &runner{table: "outboxer_messages"}
	r.publish = func(ctx context.Context, seq int64, k int, lat *latencies) error {
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := insertOrder(ctx, tx, e.dialect, seq); err != nil {
			return err
		}
		var envs []core.Envelope
		if k == 1 {
			env, err := publisher.Publish(ctx, tx, oursMessages(seq, 1)[0])
			if err != nil {
				return err
			}
			envs = []core.Envelope{env}
		} else if k > 1 {
			if envs, err = publisher.PublishAll(ctx, tx, oursMessages(seq, k)); err != nil {
				return err
			}
		}
		if lat != nil {
			lat.committing(seq)
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		if o.sameInst {
			publisher.Wake(envs...)
		}
		return nil
	}
	r.seed = func(ctx context.Context, n int) error {
		for i := 0; i < n; i += 1000 {
			if _, err := publisher.PublishAll(ctx, e.db, oursMessages(int64(i), min(1000, n-i))); err != nil {
				return err
			}
		}
		return nil
	}
	r.start = func(ctx context.Context) (func(), error) {
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- relayer.Run(ctx) }()
		// Running once every partition has its owner (or Run failed).
		deadline := time.Now().Add(30 * time.Second)
		q := `SELECT COUNT(*) FROM outboxer_messages_leases WHERE owner <> ''`
		for {
			select {
			case err := <-done:
				cancel()
				return nil, fmt.Errorf("run: %v", err)
			default:
			}
			var n int
			if err := e.db.QueryRowContext(ctx, q).Scan(&n); err == nil && n >= box.Partitions {
				break
			}
			if time.Now().After(deadline) {
				cancel()
				return nil, errors.New("the engine did not take its partitions within 30s")
			}
			time.Sleep(2 * time.Millisecond)
		}
		return func() {
			cancel()
			if err := <-done; err != nil {
				logf("ours: run: %v", err)
			}
		}, nil
	}
	return r, nil
}

// plainLoop drains the engine's table without the engine: per batch, BEGIN; SELECT the
// next rows of the partition in id order (FOR UPDATE on PostgreSQL); hand them to the
// sink; DELETE them by id; COMMIT.
func plainLoop(ctx context.Context, e *env, s *sink, o opts) (*runner, error) {
	base, err := ours(ctx, e, s, opts{batch: o.batch, partitions: 1})
	if err != nil {
		return nil, err
	}
	sel := `SELECT id, outbox, type, group_key, part, payload, headers, state, attempts, last_error, created_at, available_at
		FROM outboxer_messages WHERE outbox = $1 AND part = $2 AND state = 0 ORDER BY id LIMIT $3 FOR UPDATE`
	del := `DELETE FROM outboxer_messages WHERE id = ANY($1::bigint[])`
	if e.dialect == core.SQLite {
		sel = `SELECT id, outbox, type, group_key, part, payload, headers, state, attempts, last_error, created_at, available_at
		FROM outboxer_messages WHERE outbox = ? AND part = ? AND state = 0 ORDER BY id LIMIT ?`
		del = `DELETE FROM outboxer_messages WHERE id IN (SELECT value FROM json_each(?))`
	}
	relay := core.RelayFunc(func(_ context.Context, batch []core.Envelope) error {
		for i := range batch {
			s.accept(batch[i].Payload)
		}
		return nil
	})
	step := func(ctx context.Context) (int, error) {
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback()
		rows, err := tx.QueryContext(ctx, sel, "bench", 0, o.batch)
		if err != nil {
			return 0, err
		}
		batch := make([]core.Envelope, 0, o.batch)
		ids := make([]int64, 0, o.batch)
		for rows.Next() {
			var env core.Envelope
			var headers, lastErr sql.NullString
			var state int
			var created, avail any
			if err := rows.Scan(&env.ID, &env.Outbox, &env.Type, &env.GroupKey, &env.Partition, &env.Payload, &headers, &state, &env.Attempts, &lastErr, &created, &avail); err != nil {
				rows.Close()
				return 0, err
			}
			env.LastError = lastErr.String
			if t, ok := created.(time.Time); ok {
				env.CreatedAt = t
			} else if us, ok := created.(int64); ok {
				env.CreatedAt = time.UnixMicro(us)
			}
			batch = append(batch, env)
			ids = append(ids, env.ID)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, err
		}
		if len(batch) == 0 {
			return 0, nil
		}
		if err := relay.Deliver(ctx, batch); err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, del, idList(e.dialect, ids)); err != nil {
			return 0, err
		}
		return len(batch), tx.Commit()
	}
	r := &runner{table: "outboxer_messages", seed: base.seed}
	r.start = func(ctx context.Context) (func(), error) {
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for ctx.Err() == nil {
				n, err := step(ctx)
				if err != nil {
					if ctx.Err() == nil {
						logf("plain loop: %v", err)
					}
					return
				}
				if n == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
		return func() { cancel(); <-done }, nil
	}
	return r, nil
}

func idList(d core.Dialect, ids []int64) string {
	var b strings.Builder
	open, end := byte('{'), byte('}')
	if d == core.SQLite {
		open, end = '[', ']'
	}
	b.WriteByte(open)
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	b.WriteByte(end)
	return b.String()
}
