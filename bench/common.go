package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// payloadSize is the size of every message body, in every system.
const payloadSize = 256

// payload returns a 256-byte JSON document whose sequence number sits at bytes 7 to 17,
// so the sink can read it back without decoding.
func payload(seq int64) []byte {
	b := make([]byte, 0, payloadSize)
	b = fmt.Appendf(b, `{"seq":%010d,"type":"order.placed","customer":"c-%06d","pad":"`, seq, seq%1000000)
	for len(b) < payloadSize-2 {
		b = append(b, 'x')
	}
	return append(b, '"', '}')
}

func seqOf(p []byte) int64 {
	if len(p) < 17 {
		return -1
	}
	n, err := strconv.ParseInt(string(p[7:17]), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// sink is the in-process counting sink every system delivers to. With latency
// recording on, it notes when each sequence number first arrived.
type sink struct {
	count  atomic.Int64
	target atomic.Int64
	once   sync.Once
	done   chan struct{}
	lat    *latencies
}

func newSink(target int64, lat *latencies) *sink {
	s := &sink{done: make(chan struct{}), lat: lat}
	s.target.Store(target)
	if target == 0 {
		s.target.Store(-1)
	}
	return s
}

func (s *sink) accept(p []byte) {
	if s.lat != nil {
		s.acceptSeq(seqOf(p))
		return
	}
	s.acceptSeq(-1)
}

func (s *sink) acceptSeq(seq int64) {
	if s.lat != nil && seq >= 0 {
		s.lat.delivered(seq)
	}
	if n := s.count.Add(1); n == s.target.Load() {
		s.once.Do(func() { close(s.done) })
	}
}

// wait blocks until target messages arrived or the timeout passed; it reports the time
// at which it returned and whether the target was reached.
func (s *sink) wait(ctx context.Context, timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-s.done:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// latencies records, per sequence number, when its transaction began to commit and when
// the sink first saw it.
type latencies struct {
	start time.Time
	sent  []atomic.Int64 // ns since start; 0: not sent
	got   []atomic.Int64
}

func newLatencies(n int) *latencies {
	return &latencies{start: time.Now(), sent: make([]atomic.Int64, n), got: make([]atomic.Int64, n)}
}

func (l *latencies) committing(seq int64) {
	if seq >= 0 && int(seq) < len(l.sent) {
		l.sent[seq].Store(int64(time.Since(l.start)) + 1)
	}
}

func (l *latencies) delivered(seq int64) {
	if seq >= 0 && int(seq) < len(l.got) {
		l.got[seq].CompareAndSwap(0, int64(time.Since(l.start))+1)
	}
}

// result returns the latencies of the messages sent, and how many were never delivered.
func (l *latencies) result(n int) (ds []time.Duration, lost int) {
	for i := range n {
		s, g := l.sent[i].Load(), l.got[i].Load()
		if s == 0 {
			continue
		}
		if g == 0 {
			lost++
			continue
		}
		ds = append(ds, time.Duration(max(g-s, 0)))
	}
	return ds, lost
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p * float64(len(sorted)-1))
	return sorted[i]
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func sortDur(ds []time.Duration) []time.Duration {
	slices.Sort(ds)
	return ds
}

// env is a fresh database for one run: a PostgreSQL schema reachable through
// database/sql and through a pgx pool, both with the schema as their search path, or a
// SQLite file.
type env struct {
	dialect core.Dialect
	schema  string
	dsn     string
	db      *sql.DB
	pool    *pgxpool.Pool
	admin   *sql.DB
	dir     string
}

func newSQLite() (*env, error) {
	dir, err := os.MkdirTemp("", "outboxer-bench-")
	if err != nil {
		return nil, err
	}
	e := &env{dialect: core.SQLite, dir: dir, dsn: dbtest.SQLiteDSN(filepath.Join(dir, "bench.db"))}
	if e.db, err = sql.Open("sqlite", e.dsn); err != nil {
		return nil, err
	}
	_, err = e.db.Exec(`CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, customer TEXT NOT NULL, total INTEGER NOT NULL, created_at INTEGER NOT NULL DEFAULT 0)`)
	return e, err
}

func randomName(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func newPG(ctx context.Context, admin *sql.DB, withPool bool) (*env, error) {
	schema := randomName("bench_")
	if _, err := admin.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		return nil, fmt.Errorf("create schema: %w", err)
	}
	u, err := url.Parse(dbtest.PostgresURL())
	if err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	e := &env{dialect: core.Postgres, schema: schema, dsn: u.String(), admin: admin}
	if e.db, err = sql.Open("pgx", e.dsn); err != nil {
		return nil, err
	}
	e.db.SetMaxOpenConns(40)
	e.db.SetMaxIdleConns(40)
	if withPool {
		cfg, err := pgxpool.ParseConfig(dbtest.PostgresURL())
		if err != nil {
			return nil, err
		}
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
		cfg.MaxConns = 40
		if e.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			return nil, err
		}
	}
	_, err = e.db.ExecContext(ctx, `CREATE TABLE orders (id bigserial PRIMARY KEY, customer text NOT NULL, total bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`)
	return e, err
}

func (e *env) close() {
	if e.pool != nil {
		e.pool.Close()
	}
	e.db.Close()
	if e.dir != "" {
		os.RemoveAll(e.dir)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := e.admin.ExecContext(ctx, `DROP SCHEMA `+e.schema+` CASCADE`); err != nil {
		logf("drop schema %s: %v", e.schema, err)
	}
}

// tableSize samples a table's total size, index size and dead tuples.
type tableSample struct {
	At        float64 `json:"at_s"`
	TotalB    int64   `json:"total_bytes"`
	IndexB    int64   `json:"index_bytes"`
	DeadTup   int64   `json:"dead_tuples"`
	LiveTup   int64   `json:"live_tuples"`
	Delivered int64   `json:"delivered"`
}

func sampleTable(ctx context.Context, db *sql.DB, schema, table string) (tableSample, error) {
	var s tableSample
	rel := schema + "." + table
	err := db.QueryRowContext(ctx, `SELECT pg_total_relation_size($1::regclass), pg_indexes_size($1::regclass),
		COALESCE((SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = $2 AND relname = $3), 0),
		COALESCE((SELECT n_live_tup FROM pg_stat_user_tables WHERE schemaname = $2 AND relname = $3), 0)`,
		rel, schema, table).Scan(&s.TotalB, &s.IndexB, &s.DeadTup, &s.LiveTup)
	return s, err
}

// offer publishes at rate messages per second for d, spread over producers goroutines,
// calling publish with consecutive sequence numbers. It stops after d even when the
// producers could not keep up, and returns how many were sent.
func offer(ctx context.Context, rate float64, d time.Duration, producers int, publish func(ctx context.Context, seq int64) error) (int64, error) {
	total := int64(rate * d.Seconds())
	jobs := make(chan int64, producers*4)
	var firstErr firstError
	var wg sync.WaitGroup
	for range producers {
		wg.Go(func() {
			for seq := range jobs {
				if err := publish(ctx, seq); err != nil {
					firstErr.set(err)
				}
			}
		})
	}
	start := time.Now()
	var sent int64
	end := start.Add(d)
	for sent = 0; sent < total && ctx.Err() == nil; sent++ {
		due := start.Add(time.Duration(float64(sent) / rate * float64(time.Second)))
		if w := time.Until(due); w > 0 {
			time.Sleep(w)
		}
		if time.Now().After(end) {
			break // the producers fell behind the offered rate: stop on time anyway
		}
		jobs <- sent
		if firstErr.get() != nil {
			break
		}
	}
	close(jobs)
	wg.Wait()
	if err := firstErr.get(); err != nil {
		return sent, err
	}
	return sent, ctx.Err()
}

// firstError keeps the first error reported to it, from any goroutine.
type firstError struct {
	mu  sync.Mutex
	err error
}

func (f *firstError) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

func (f *firstError) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// closedLoop runs producers goroutines calling tx back to back for d, and returns the
// latency of every call.
func closedLoop(ctx context.Context, d time.Duration, producers int, tx func(ctx context.Context, worker int, i int64) error) ([]time.Duration, time.Duration, error) {
	var mu sync.Mutex
	var all []time.Duration
	var firstErr firstError
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range producers {
		wg.Go(func() {
			local := make([]time.Duration, 0, 4096)
			for i := int64(0); time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				t0 := time.Now()
				if err := tx(ctx, w, i); err != nil {
					firstErr.set(err)
					return
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			all = append(all, local...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := firstErr.get(); err != nil {
		return nil, elapsed, err
	}
	return all, elapsed, nil
}
