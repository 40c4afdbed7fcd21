// Command bench measures Outboxer's relay engine on PostgreSQL and SQLite, against a
// plain SQL fetch-and-delete loop, Watermill's SQL forwarder and River, in one run, and
// writes BENCHMARKS.md and bench/results.json.
//
//	cd bench && go run .          # the full run (about 30 minutes)
//	cd bench && go run . -quick   # a smoke run (about 3 minutes) into bench/*-quick.*
//
// Systems alternate run by run within each round; figures are medians over the rounds
// with their min and max.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

type config struct {
	quick         bool
	rounds        int
	backlog       int
	peerBacklog   int
	drainCap      time.Duration
	latencyRate   float64
	latencyFor    time.Duration
	publishFor    time.Duration
	steadyFor     time.Duration
	steadyPeerFor time.Duration
	steadyRate    float64
	steadyEvery   time.Duration
	riverWorkers  int
	workloads     string
	mdPath        string
	jsonPath      string
	cpuprofile    string
	render        bool
	vacuumEvery   time.Duration
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func repoRoot() string {
	if _, err := os.Stat(filepath.Join("bench", "go.mod")); err == nil {
		return "."
	}
	return ".."
}

func main() {
	var c config
	root := repoRoot()
	flag.BoolVar(&c.quick, "quick", false, "smoke run: 1 round, small backlogs, short durations (under 3 minutes)")
	flag.IntVar(&c.rounds, "rounds", 3, "rounds; systems alternate within each round")
	flag.IntVar(&c.backlog, "backlog", 100_000, "pending messages at the start of each drain")
	flag.DurationVar(&c.drainCap, "drain-cap", 20*time.Second, "longest a drain run may take; a slower system's rate is what it delivered by then")
	flag.Float64Var(&c.latencyRate, "latency-rate", 1000, "messages per second offered in the latency workload")
	flag.DurationVar(&c.latencyFor, "latency-for", 8*time.Second, "duration of each latency run")
	flag.DurationVar(&c.publishFor, "publish-for", 4*time.Second, "duration of each publish-overhead run")
	flag.DurationVar(&c.steadyFor, "steady-for", 10*time.Minute, "duration of our steady-state run")
	flag.DurationVar(&c.steadyPeerFor, "steady-peers-for", 2*time.Minute, "duration of each peer's steady-state run")
	flag.Float64Var(&c.steadyRate, "steady-rate", 0, "messages per second in the steady state; 0: half the lowest maximum rate measured in this run")
	flag.DurationVar(&c.steadyEvery, "steady-every", 15*time.Second, "interval between table-size samples")
	flag.IntVar(&c.riverWorkers, "river-workers", 0, "River MaxWorkers for its best unordered figure; 0: try 10, 50, 100, 200 and keep the fastest")
	flag.StringVar(&c.workloads, "workloads", "drain,sqlite,latency,publish,steady", "workloads to run, comma-separated")
	flag.StringVar(&c.mdPath, "md", filepath.Join(root, "BENCHMARKS.md"), "where to write the report")
	flag.StringVar(&c.jsonPath, "json", filepath.Join(root, "bench", "results.json"), "where to write the figures")
	flag.StringVar(&c.cpuprofile, "cpuprofile", "", "write a CPU profile of our PostgreSQL drain at batch 1,000 (first round) here")
	flag.DurationVar(&c.vacuumEvery, "vacuum-every", 0, "steady state: also run VACUUM on the message table this often; 0: every 15 s when the server's autovacuum is off, otherwise never; negative: never")
	flag.BoolVar(&c.render, "render", false, "write the report again from the JSON file, measuring nothing")
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.quick {
		def := func(name string, apply func()) {
			if !set[name] {
				apply()
			}
		}
		def("rounds", func() { c.rounds = 1 })
		def("backlog", func() { c.backlog = 20_000 })
		def("drain-cap", func() { c.drainCap = 6 * time.Second })
		def("latency-for", func() { c.latencyFor = 3 * time.Second })
		def("publish-for", func() { c.publishFor = 1 * time.Second })
		def("steady-for", func() { c.steadyFor = time.Minute })
		def("steady-peers-for", func() { c.steadyPeerFor = 10 * time.Second })
		def("steady-every", func() { c.steadyEvery = 5 * time.Second })
		def("river-workers", func() { c.riverWorkers = 100 })
		// A smoke run must not replace the published figures.
		def("md", func() { c.mdPath = filepath.Join(root, "bench", "BENCHMARKS-quick.md") })
		def("json", func() { c.jsonPath = filepath.Join(root, "bench", "results-quick.json") })
	}
	if c.render {
		if err := render(c); err != nil {
			logf("bench: %v", err)
			os.Exit(1)
		}
		return
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	if err := run(ctx, c, os.Args[1:]); err != nil {
		logf("bench: %v", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config, args []string) error {
	admin, err := sql.Open("pgx", dbtest.PostgresURL())
	if err != nil {
		return err
	}
	defer admin.Close()
	if err := admin.PingContext(ctx); err != nil {
		return fmt.Errorf("PostgreSQL at %s: %w", dbtest.PostgresURL(), err)
	}
	b := &bench{admin: admin, cfg: c, res: newResults(c, args)}
	b.res.Machine = machine(ctx, admin)
	if c.vacuumEvery == 0 && b.res.Machine.Autovacuum == "off" {
		// Stand in for autovacuum, for every system alike: without it no deleted or
		// updated row is ever reclaimed and the steady state measures the server's
		// configuration rather than the systems.
		b.cfg.vacuumEvery = 15 * time.Second
	}
	began := time.Now()
	want := map[string]bool{}
	for _, w := range strings.Split(c.workloads, ",") {
		want[strings.TrimSpace(w)] = true
	}
	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"drain", b.runDrainPG},
		{"sqlite", b.runDrainSQLite},
		{"latency", b.runLatency},
		{"publish", b.runPublish},
		{"steady", b.runSteady},
	}
	for _, s := range steps {
		if !want[s.name] {
			continue
		}
		t0 := time.Now()
		logf("== %s", s.name)
		if err := s.run(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		logf("== %s done in %s", s.name, time.Since(t0).Round(time.Second))
		// Keep what we have so far.
		if err := b.res.write(c, time.Since(began)); err != nil {
			return err
		}
	}
	b.res.Machine.LoadAfter = loadavg()
	return b.res.write(c, time.Since(began))
}

func (b *bench) runDrainPG(ctx context.Context) error {
	c := b.cfg
	workers := c.riverWorkers
	if workers == 0 {
		best := 0.0
		for _, w := range []int{10, 50, 100, 200} {
			rate, _, err := b.drain(ctx, core.Postgres, riverQueue, opts{workers: w}, 20_000, "")
			if err != nil {
				return fmt.Errorf("river sweep: %w", err)
			}
			logf("river sweep: %d workers: %.0f msg/s (backlog 20,000)", w, rate)
			b.res.add("drain-pg", "River (sweep, backlog 20,000)", fmt.Sprintf("%d workers", w), "msg/s", 20_000, 0, rate)
			if rate > best {
				best, workers = rate, w
			}
		}
	}
	b.res.RiverWorkers = workers
	type sys struct {
		system, variant string
		f               factory
		o               opts
		batch           int
	}
	var systems []sys
	for _, batch := range []int{100, 1000} {
		systems = append(systems,
			sys{"ours (P=1)", "", ours, opts{batch: batch, partitions: 1}, batch},
			sys{"plain SQL loop", "", plainLoop, opts{batch: batch}, batch},
			sys{"ours (P=4)", "", ours, opts{batch: batch, partitions: 4}, batch},
			sys{"Watermill SQL forwarder", "", watermillForwarder, opts{batch: batch}, batch},
		)
	}
	systems = append(systems,
		sys{"River", fmt.Sprintf("%d workers, unordered", workers), riverQueue, opts{workers: workers}, 0},
		sys{"River", "1 worker, ordered", riverQueue, opts{workers: 1}, 0},
	)
	for round := range c.rounds {
		for _, s := range systems {
			profile := ""
			if round == 0 && c.cpuprofile != "" && s.system == "ours (P=1)" && s.batch == 1000 {
				profile = c.cpuprofile
			}
			rate, capped, err := b.drain(ctx, core.Postgres, s.f, s.o, c.backlog, profile)
			if err != nil {
				return fmt.Errorf("%s batch %d: %w", s.system, s.batch, err)
			}
			note := ""
			if capped {
				note = fmt.Sprintf("cut at %s", c.drainCap)
			}
			logf("round %d: drain pg %s %s batch %d: %.0f msg/s %s", round+1, s.system, s.variant, s.batch, rate, note)
			b.res.add("drain-pg", s.system, s.variant, "msg/s", c.backlog, s.batch, rate).noteIf(note)
		}
	}
	return nil
}

func (b *bench) runDrainSQLite(ctx context.Context) error {
	c := b.cfg
	for round := range c.rounds {
		for _, batch := range []int{100, 1000} {
			for _, s := range []struct {
				name string
				f    factory
			}{{"ours (P=1)", ours}, {"plain SQL loop", plainLoop}} {
				rate, capped, err := b.drain(ctx, core.SQLite, s.f, opts{batch: batch, partitions: 1}, c.backlog, "")
				if err != nil {
					return fmt.Errorf("%s batch %d: %w", s.name, batch, err)
				}
				note := ""
				if capped {
					note = fmt.Sprintf("cut at %s", c.drainCap)
				}
				logf("round %d: drain sqlite %s batch %d: %.0f msg/s %s", round+1, s.name, batch, rate, note)
				b.res.add("drain-sqlite", s.name, "", "msg/s", c.backlog, batch, rate).noteIf(note)
			}
		}
	}
	return nil
}

func (b *bench) runLatency(ctx context.Context) error {
	c := b.cfg
	workers := cmpOr(b.res.RiverWorkers, 100)
	variants := []struct {
		system, variant string
		f               factory
		o               opts
	}{
		{"ours (P=4)", "Notify, publish-only publisher", ours, opts{batch: 100, partitions: 4, notify: true}},
		{"ours (P=4)", "no Notify, publish-only publisher (1 s poll)", ours, opts{batch: 100, partitions: 4}},
		{"ours (P=4)", "no Notify, same instance (in-process wake-up)", ours, opts{batch: 100, partitions: 4, sameInst: true}},
		{"Watermill SQL forwarder", fmt.Sprintf("read batch 100, poll %s", watermillPollInterval), watermillForwarder, opts{batch: 100}},
		{"River", fmt.Sprintf("%d workers, LISTEN/NOTIFY", workers), riverQueue, opts{workers: workers}},
	}
	for round := range c.rounds {
		for _, v := range variants {
			r, err := b.latency(ctx, v.f, v.o, c.latencyRate, c.latencyFor)
			if err != nil {
				return fmt.Errorf("%s %s: %w", v.system, v.variant, err)
			}
			logf("round %d: latency %s %s: p50 %.2f ms p99 %.2f ms p99.9 %.2f ms (sent %d, lost %d)", round+1, v.system, v.variant, msOf(r.p50), msOf(r.p99), msOf(r.p999), r.sent, r.lost)
			note := ""
			if r.lost > 0 {
				note = fmt.Sprintf("%d not delivered within 30 s", r.lost)
			}
			b.res.add("latency", v.system, v.variant, "p50 ms", 0, 0, msOf(r.p50)).noteIf(note)
			b.res.add("latency", v.system, v.variant, "p99 ms", 0, 0, msOf(r.p99))
			b.res.add("latency", v.system, v.variant, "p99.9 ms", 0, 0, msOf(r.p999))
		}
	}
	return nil
}

func (b *bench) runPublish(ctx context.Context) error {
	c := b.cfg
	type sys struct {
		name string
		f    factory
		ks   []int
	}
	systems := []sys{
		{"bare transaction (database/sql)", bareSQL, []int{0}},
		{"ours", ours, []int{1, 10}},
		{"Watermill SQL forwarder", watermillForwarder, []int{1, 10}},
		{"bare transaction (pgx pool)", barePgx, []int{0}},
		{"River", riverQueue, []int{1, 10}},
	}
	for round := range c.rounds {
		for _, producers := range []int{1, 16} {
			for _, s := range systems {
				for _, k := range s.ks {
					r, err := b.overhead(ctx, s.f, k, producers, c.publishFor)
					if err != nil {
						return fmt.Errorf("%s k=%d producers=%d: %w", s.name, k, producers, err)
					}
					variant := fmt.Sprintf("%d msg/tx, %d producers", k, producers)
					logf("round %d: publish %s %s: %.0f tx/s p50 %.0f µs p99 %.0f µs", round+1, s.name, variant, r.tps, us(r.p50), us(r.p99))
					b.res.add("publish", s.name, variant, "tx/s", 0, 0, r.tps)
					b.res.add("publish", s.name, variant, "p50 µs", 0, 0, us(r.p50))
					b.res.add("publish", s.name, variant, "p99 µs", 0, 0, us(r.p99))
				}
			}
		}
	}
	return nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func cmpOr(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func (b *bench) runSteady(ctx context.Context) error {
	c := b.cfg
	rate := c.steadyRate
	if rate == 0 {
		// Half the lowest maximum among the systems: the slowest system's best drain,
		// and every system's publish throughput at 16 producers with 1 message.
		var maxes []float64
		for _, sys := range []string{"ours (P=4)", "Watermill SQL forwarder"} {
			if f := b.res.find("drain-pg", sys, "", "msg/s", 1000); f != nil {
				maxes = append(maxes, f.Median)
			}
		}
		if f := b.res.findPrefix("drain-pg", "River", "workers, unordered"); f != nil {
			maxes = append(maxes, f.Median)
		}
		for _, sys := range []string{"ours", "Watermill SQL forwarder", "River"} {
			if f := b.res.find("publish", sys, "1 msg/tx, 16 producers", "tx/s", 0); f != nil {
				maxes = append(maxes, f.Median)
			}
		}
		if len(maxes) == 0 {
			rate = 1000
		} else {
			rate = slices.Min(maxes) / 2
		}
		b.res.SteadyRateRule = "half the lowest of: each system's best PostgreSQL drain rate and its publish throughput (16 producers, 1 message per transaction), as measured earlier in this run"
	}
	workers := cmpOr(b.res.RiverWorkers, 100)
	for _, v := range []struct {
		system string
		f      factory
		o      opts
		d      time.Duration
	}{
		{"ours (P=4, Notify)", ours, opts{batch: 100, partitions: 4, notify: true}, c.steadyFor},
		{"Watermill SQL forwarder (batch 100)", watermillForwarder, opts{batch: 100}, c.steadyPeerFor},
		{fmt.Sprintf("River (%d workers)", workers), riverQueue, opts{workers: workers}, c.steadyPeerFor},
	} {
		logf("steady %s: %.0f msg/s for %s", v.system, rate, v.d)
		r, err := b.steady(ctx, v.f, v.o, rate, v.d, c.steadyEvery)
		if err != nil {
			return fmt.Errorf("%s: %w", v.system, err)
		}
		last := r.Samples[len(r.Samples)-1]
		logf("steady %s: sent %d (%.0f msg/s achieved) delivered %d; table %d kB, index %d kB, dead tuples %d", v.system, r.Sent, r.Achieved, r.Delivered, last.TotalB/1024, last.IndexB/1024, last.DeadTup)
		b.res.Steady = append(b.res.Steady, steadyEntry{System: v.system, steadyResult: r})
	}
	return nil
}

// render rewrites the report from the figures of an earlier run.
func render(c config) error {
	b, err := os.ReadFile(c.jsonPath)
	if err != nil {
		return err
	}
	var r results
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %w", c.jsonPath, err)
	}
	r.readAnalysis(c)
	return os.WriteFile(c.mdPath, []byte(r.markdown()), 0o644)
}
