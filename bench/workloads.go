package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/outboxer-go/outboxer/core"
)

type bench struct {
	admin *sql.DB
	cfg   config
	res   *results
}

func (b *bench) env(ctx context.Context, d core.Dialect) (*env, error) {
	if d == core.SQLite {
		return newSQLite()
	}
	return newPG(ctx, b.admin, true)
}

func analyze(ctx context.Context, e *env, table string) {
	if _, err := e.db.ExecContext(ctx, `ANALYZE `+table); err != nil {
		logf("analyze %s: %v", table, err)
	}
}

// drain seeds backlog messages and measures how fast the system delivers them all to
// the sink, from the moment delivery starts; a run longer than cap is cut and its rate
// is what it delivered by then.
func (b *bench) drain(ctx context.Context, d core.Dialect, f factory, o opts, backlog int, profile string) (rate float64, capped bool, err error) {
	e, err := b.env(ctx, d)
	if err != nil {
		return 0, false, err
	}
	defer e.close()
	s := newSink(int64(backlog), nil)
	r, err := f(ctx, e, s, o)
	if err != nil {
		return 0, false, err
	}
	if err := r.seed(ctx, backlog); err != nil {
		return 0, false, fmt.Errorf("seed: %w", err)
	}
	analyze(ctx, e, r.table)
	if profile != "" {
		pf, err := os.Create(profile)
		if err != nil {
			return 0, false, err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return 0, false, err
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	stop, err := r.start(ctx)
	if err != nil {
		return 0, false, err
	}
	ok := s.wait(ctx, b.cfg.drainCap)
	elapsed := time.Since(start)
	n := s.count.Load()
	stop()
	return float64(n) / elapsed.Seconds(), !ok, ctx.Err()
}

type latencyResult struct {
	p50, p99, p999 time.Duration
	sent           int64
	lost           int
}

// latency offers rate messages per second for d across 16 groups (16 producers, one
// message per business transaction) and measures from just before each commit to its
// arrival at the sink.
func (b *bench) latency(ctx context.Context, f factory, o opts, rate float64, d time.Duration) (latencyResult, error) {
	e, err := b.env(ctx, core.Postgres)
	if err != nil {
		return latencyResult{}, err
	}
	defer e.close()
	n := int(rate * d.Seconds())
	lat := newLatencies(n)
	s := newSink(int64(n), lat)
	r, err := f(ctx, e, s, o)
	if err != nil {
		return latencyResult{}, err
	}
	stop, err := r.start(ctx)
	if err != nil {
		return latencyResult{}, err
	}
	defer stop()
	lat.start = time.Now()
	sent, err := offer(ctx, rate, d, groups, func(ctx context.Context, seq int64) error { return r.publish(ctx, seq, 1, lat) })
	if err != nil {
		return latencyResult{}, err
	}
	if sent < int64(n) {
		s.target.Store(sent)
		if s.count.Load() >= sent {
			s.once.Do(func() { close(s.done) })
		}
	}
	s.wait(ctx, 30*time.Second)
	ds, lost := lat.result(n)
	sortDur(ds)
	return latencyResult{p50: percentile(ds, 0.50), p99: percentile(ds, 0.99), p999: percentile(ds, 0.999), sent: sent, lost: lost}, nil
}

type overheadResult struct {
	tps      float64
	p50, p99 time.Duration
}

// overhead runs business transactions back to back from producers goroutines for d,
// each inserting an order row and publishing k messages, with nothing delivering.
func (b *bench) overhead(ctx context.Context, f factory, k, producers int, d time.Duration) (overheadResult, error) {
	e, err := b.env(ctx, core.Postgres)
	if err != nil {
		return overheadResult{}, err
	}
	defer e.close()
	r, err := f(ctx, e, newSink(0, nil), opts{batch: 100, partitions: 1, workers: 1})
	if err != nil {
		return overheadResult{}, err
	}
	tx := func(ctx context.Context, w int, i int64) error {
		return r.publish(ctx, int64(w)*100_000_000+i*int64(max(k, 1)), k, nil)
	}
	// Warm the connection pool and the caches first.
	if _, _, err := closedLoop(ctx, 300*time.Millisecond, producers, tx); err != nil {
		return overheadResult{}, err
	}
	lats, elapsed, err := closedLoop(ctx, d, producers, tx)
	if err != nil {
		return overheadResult{}, err
	}
	sortDur(lats)
	return overheadResult{tps: float64(len(lats)) / elapsed.Seconds(), p50: percentile(lats, 0.5), p99: percentile(lats, 0.99)}, nil
}

type steadyResult struct {
	Rate      float64       `json:"rate_msg_s"`
	Achieved  float64       `json:"achieved_msg_s"`
	Duration  float64       `json:"duration_s"`
	Sent      int64         `json:"sent"`
	Delivered int64         `json:"delivered"`
	Table     string        `json:"table"`
	Samples   []tableSample `json:"samples"`
	Vacuum    string        `json:"vacuum,omitempty"`
}

// steady offers rate messages per second for d while the system delivers, sampling the
// message table's size, index size and dead tuples every interval.
func (b *bench) steady(ctx context.Context, f factory, o opts, rate float64, d, every time.Duration) (steadyResult, error) {
	e, err := b.env(ctx, core.Postgres)
	if err != nil {
		return steadyResult{}, err
	}
	defer e.close()
	s := newSink(0, nil)
	r, err := f(ctx, e, s, o)
	if err != nil {
		return steadyResult{}, err
	}
	stop, err := r.start(ctx)
	if err != nil {
		return steadyResult{}, err
	}
	res := steadyResult{Rate: rate, Duration: d.Seconds(), Table: r.table}
	start := time.Now()
	sample := func() {
		t, err := sampleTable(ctx, e.db, e.schema, r.table)
		if err != nil {
			logf("sample: %v", err)
			return
		}
		t.At = time.Since(start).Seconds()
		t.Delivered = s.count.Load()
		res.Samples = append(res.Samples, t)
	}
	sample()
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
				sample()
			}
		}
	})
	offered := time.Now()
	if b.cfg.vacuumEvery > 0 {
		res.Vacuum = fmt.Sprintf("VACUUM %s every %s", r.table, b.cfg.vacuumEvery)
		wg.Go(func() {
			tick := time.NewTicker(b.cfg.vacuumEvery)
			defer tick.Stop()
			for {
				select {
				case <-sctx.Done():
					return
				case <-tick.C:
					if _, err := e.db.ExecContext(sctx, `VACUUM `+r.table); err != nil && sctx.Err() == nil {
						logf("vacuum: %v", err)
					}
				}
			}
		})
	}
	sent, err := offer(ctx, rate, d, groups, func(ctx context.Context, seq int64) error { return r.publish(ctx, seq, 1, nil) })
	res.Achieved = float64(sent) / time.Since(offered).Seconds()
	cancel()
	wg.Wait()
	// Give delivery a moment to catch up, then take the last sample.
	deadline := time.Now().Add(10 * time.Second)
	for s.count.Load() < sent && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	sample()
	stop()
	res.Sent, res.Delivered = sent, s.count.Load()
	return res, err
}
