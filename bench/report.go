package main

import (
	"fmt"
	"strings"
)

func (r *results) markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	m := r.Machine
	mode := "full"
	if r.Quick {
		mode = "quick (smoke) mode: one round, small backlog, short runs: not the published figures"
	}
	w("# Benchmarks\n\n")
	w("Written by the bench program (`bench/`); the raw figures, every round's value and the steady-state samples are in `bench/results.json`.\n\n")
	w("- Command: `%s` (run from the repository root; %s)\n", r.Command, mode)
	w("- Started %s UTC, took %s; %d round(s): the systems alternate run by run within each round, and each figure is the median over the rounds with min–max in brackets.\n", r.Started.Format("2006-01-02 15:04"), r.Elapsed, r.Rounds)
	w("- Machine: %s, %d cores, %.1f GiB memory, %s (%s). Load average before: %s; after: %s.\n", m.CPU, m.Cores, m.MemoryGiB, m.OS, m.Kernel, m.LoadBefore, m.LoadAfter)
	w("- The machine was shared: other engineers ran test suites on it during the run, so figures are noisy; PostgreSQL runs on the same 2 cores as the benchmark.\n")
	w("- Versions: %s; PostgreSQL %s (127.0.0.1, autovacuum %s); SQLite %s (modernc.org/sqlite %s, WAL, synchronous NORMAL); pgx %s; watermill %s; watermill-sql %s; river %s (riverpgxv5 %s).\n",
		m.Go, m.PostgreSQL, cmpStr(m.Autovacuum, "not recorded"), m.SQLite, m.Modules["modernc.org/sqlite"], m.Modules["github.com/jackc/pgx/v5"],
		m.Modules["github.com/ThreeDotsLabs/watermill"], m.Modules["github.com/ThreeDotsLabs/watermill-sql/v4"],
		m.Modules["github.com/riverqueue/river"], m.Modules["github.com/riverqueue/river/riverdriver/riverpgxv5"])
	w("- Every system gets the same 256-byte JSON payload and delivers into the same in-process counting sink. Each run gets a fresh PostgreSQL schema (or SQLite file).\n\n")

	w("## What is measured\n\n")
	w("- **ours**: the core engine (`core.New` + `Run`, PostgreSQL or SQLite dialect, ordering `group`, retention `delete`), relay = the counting sink. P = `Partitions`.\n")
	w("- **plain SQL loop**: no library, the engine's own table: `BEGIN; SELECT … WHERE outbox = $1 AND part = 0 AND state = 0 ORDER BY id LIMIT n FOR UPDATE` (no `FOR UPDATE` on SQLite); hand the rows to the sink; `DELETE … WHERE id = ANY(ids)`; `COMMIT`.\n")
	w("- **Watermill SQL forwarder**: watermill-sql's PostgreSQL publisher (`DefaultPostgreSQLSchema`) built on the business `*sql.Tx`, wrapped by `components/forwarder`'s publisher; the forwarder reads with the SQL subscriber (`DefaultPostgreSQLOffsetsAdapter`, `SubscribeBatchSize` = the read batch, `PollInterval` %s instead of its 1 s default) and publishes to a counting publisher.\n", watermillPollInterval)
	w("- **River**: `InsertTx` on the business `pgx.Tx` (riverpgxv5), a worker calling the sink, tables from `rivermigrate` in the run's schema, `FetchCooldown` at its 1 ms minimum (its docs: throughput is limited by it), LISTEN/NOTIFY on. River has no read-batch setting: a fetch takes as many jobs as there are free workers. Best unordered worker count in this run: %d (chosen by the sweep below); 1 worker is River's only ordered setting. River keeps completed jobs (24 h by default) where the others delete.\n\n", r.RiverWorkers)

	r.drainPG(w)
	r.drainSQLite(w)
	r.latencyTable(w)
	r.publishTable(w)
	r.steadyTable(w)
	r.targets(w)
	if r.analysis != "" {
		w("## Reading the figures\n\n%s", r.analysis)
	}
	return b.String()
}

type writer func(format string, args ...any)

func (r *results) drainPG(w writer) {
	if r.find("drain-pg", "ours (P=1)", "", "msg/s", 100) == nil {
		return
	}
	backlog := r.find("drain-pg", "ours (P=1)", "", "msg/s", 100).Backlog
	w("## 1. Drain on PostgreSQL (issues 3 and 8)\n\n")
	w("%s messages pending at the start of each run; msg/s from the start of delivery until the sink counted the last one. \"ours ÷ this\" compares with ours (P=1) at the same read batch (our default batch, 100, for River).\n\n", fmtRate(float64(backlog)))
	w("| system | read batch | backlog | msg/s | ours (P=1) ÷ this | notes |\n|---|---|---|---|---|---|\n")
	for _, batch := range []int{100, 1000} {
		ref := r.find("drain-pg", "ours (P=1)", "", "msg/s", batch)
		for _, sys := range []string{"ours (P=1)", "ours (P=4)", "plain SQL loop", "Watermill SQL forwarder"} {
			f := r.find("drain-pg", sys, "", "msg/s", batch)
			if f == nil {
				continue
			}
			w("| %s | %s | %s | %s | %s | %s |\n", sys, fmtRate(float64(batch)), fmtRate(float64(f.Backlog)), f.spread(fmtRate), ratio(ref, f), strings.Join(f.Notes, "; "))
		}
	}
	ref := r.find("drain-pg", "ours (P=1)", "", "msg/s", 100)
	for _, f := range r.Figures {
		if f.Workload == "drain-pg" && f.System == "River" {
			w("| River, %s | – | %s | %s | %s | %s |\n", f.Variant, fmtRate(float64(f.Backlog)), f.spread(fmtRate), ratio(ref, f), strings.Join(f.Notes, "; "))
		}
	}
	for _, f := range r.Figures {
		if f.Workload == "drain-pg" && strings.HasPrefix(f.System, "River (sweep") {
			w("| River sweep, %s | – | 20,000 | %s | – | first round only, picks the best worker count |\n", f.Variant, f.spread(fmtRate))
		}
	}
	w("\n")
}

func (r *results) drainSQLite(w writer) {
	if r.find("drain-sqlite", "ours (P=1)", "", "msg/s", 100) == nil {
		return
	}
	w("## 2. Drain on SQLite (issue 3)\n\n")
	w("| system | read batch | backlog | msg/s | plain loop ÷ ours |\n|---|---|---|---|---|\n")
	for _, batch := range []int{100, 1000} {
		o := r.find("drain-sqlite", "ours (P=1)", "", "msg/s", batch)
		p := r.find("drain-sqlite", "plain SQL loop", "", "msg/s", batch)
		for _, f := range []*figure{o, p} {
			if f == nil {
				continue
			}
			rt := ratio(p, o)
			if f == p {
				rt = "–"
			}
			w("| %s | %s | %s | %s | %s |\n", f.System, fmtRate(float64(batch)), fmtRate(float64(f.Backlog)), f.spread(fmtRate), rt)
		}
	}
	w("\n")
}

func (r *results) latencyTable(w writer) {
	ref := r.findPrefix("latency", "ours (P=4)", "Notify, publish-only publisher")
	if ref == nil {
		return
	}
	w("## 3. Publish-to-delivery latency (issues 3 and 8)\n\n")
	w("1,000 messages per second offered for the run's duration by 16 producers, one message per business transaction (an order row), 16 group keys. Measured from just before each commit to the message's arrival at the sink. \"publish-only publisher\" publishes through a second, publish-only instance, as another process would: it cannot wake the relay's workers in-process. Without Notify the relay's PollInterval is the default 1 s.\n\n")
	w("| system | setting | p50 ms | p99 ms | p99.9 ms | p99 ÷ ours (Notify) p99 | notes |\n|---|---|---|---|---|---|---|\n")
	ref99 := r.find("latency", ref.System, ref.Variant, "p99 ms", 0)
	for _, f := range r.Figures {
		if f.Workload != "latency" || f.Metric != "p50 ms" {
			continue
		}
		p99 := r.find("latency", f.System, f.Variant, "p99 ms", 0)
		p999 := r.find("latency", f.System, f.Variant, "p99.9 ms", 0)
		w("| %s | %s | %s | %s | %s | %s | %s |\n", f.System, f.Variant, f.spread(fmtMs), p99.spread(fmtMs), p999.spread(fmtMs), ratio(p99, ref99), strings.Join(f.Notes, "; "))
	}
	w("\n")
}

func (r *results) publishTable(w writer) {
	if r.find("publish", "ours", "1 msg/tx, 1 producers", "tx/s", 0) == nil {
		return
	}
	w("## 4. Publish overhead (issue 8)\n\n")
	w("Business transactions back to back (BEGIN; INSERT an order row; publish k messages; COMMIT), with nothing delivering. \"added\" is this latency minus the bare transaction's on the same driver (database/sql with pgx for ours and Watermill; a pgx pool for River, whose driver needs one). \"÷ bare\" is this throughput over the bare transaction's; \"ours ÷ this\" is our throughput over this one's.\n\n")
	w("| system | msgs/tx | producers | tx/s | ÷ bare | ours ÷ this | p50 µs | added p50 µs | p99 µs | added p99 µs |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, producers := range []int{1, 16} {
		for _, sys := range []string{"bare transaction (database/sql)", "ours", "Watermill SQL forwarder", "bare transaction (pgx pool)", "River"} {
			bare := "bare transaction (database/sql)"
			if sys == "River" || sys == "bare transaction (pgx pool)" {
				bare = "bare transaction (pgx pool)"
			}
			bv := fmt.Sprintf("0 msg/tx, %d producers", producers)
			btps := r.find("publish", bare, bv, "tx/s", 0)
			b50 := r.find("publish", bare, bv, "p50 µs", 0)
			b99 := r.find("publish", bare, bv, "p99 µs", 0)
			for _, k := range []int{0, 1, 10} {
				v := fmt.Sprintf("%d msg/tx, %d producers", k, producers)
				tps := r.find("publish", sys, v, "tx/s", 0)
				if tps == nil {
					continue
				}
				p50 := r.find("publish", sys, v, "p50 µs", 0)
				p99 := r.find("publish", sys, v, "p99 µs", 0)
				oursTps := r.find("publish", "ours", v, "tx/s", 0)
				added := func(a, b *figure) string {
					if a == nil || b == nil || k == 0 {
						return "–"
					}
					return fmt.Sprintf("%+.0f", a.Median-b.Median)
				}
				vsBare, vsOurs := ratio(tps, btps), ratio(oursTps, tps)
				if k == 0 {
					vsBare, vsOurs = "–", "–"
				}
				w("| %s | %d | %d | %s | %s | %s | %s | %s | %s | %s |\n", sys, k, producers, tps.spread(fmtRate), vsBare, vsOurs,
					p50.spread(fmtRate), added(p50, b50), p99.spread(fmtRate), added(p99, b99))
			}
		}
	}
	w("\n")
}

func (r *results) steadyTable(w writer) {
	if len(r.Steady) == 0 {
		return
	}
	w("## 5. Steady state (issues 3 and 8)\n\n")
	w("Messages offered at %s msg/s (%s) by 16 producers, one per business transaction, while the system delivers. Size of the message table (with indexes and TOAST: `pg_total_relation_size`), of its indexes, and its dead tuples (`pg_stat_user_tables.n_dead_tup`), sampled over the run.%s One run per system (no rounds). When the producers cannot keep up with the offered rate (the publishing transactions slow down while delivery runs on the same 2 cores), \"msg/s achieved\" says what was really offered.\n\n", fmtRate(r.Steady[0].Rate), r.SteadyRateRule, vacuumNote(r))
	w("| system | table | minutes | msg/s achieved | sent | delivered | total size: start → max → end | index size: start → max → end | dead tuples: max / end |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.Steady {
		if len(s.Samples) == 0 {
			continue
		}
		first, last := s.Samples[min(1, len(s.Samples)-1)], s.Samples[len(s.Samples)-1]
		var maxT, maxI, maxD int64
		for _, x := range s.Samples {
			maxT, maxI, maxD = max(maxT, x.TotalB), max(maxI, x.IndexB), max(maxD, x.DeadTup)
		}
		w("| %s | %s | %.1f | %s | %s | %s | %s → %s → %s | %s → %s → %s | %s / %s |\n", s.System, s.Table, s.Duration/60, fmtRate(s.Achieved), fmtRate(float64(s.Sent)), fmtRate(float64(s.Delivered)),
			kb(first.TotalB), kb(maxT), kb(last.TotalB), kb(first.IndexB), kb(maxI), kb(last.IndexB), fmtRate(float64(maxD)), fmtRate(float64(last.DeadTup)))
	}
	w("\nSamples over time (total size in kB / dead tuples):\n\n")
	for _, s := range r.Steady {
		var parts []string
		for _, x := range s.Samples {
			parts = append(parts, fmt.Sprintf("%.0fs: %s/%s", x.At, fmtRate(float64(x.TotalB)/1024), fmtRate(float64(x.DeadTup))))
		}
		extra := ""
		if s.Vacuum != "" {
			extra = " (" + s.Vacuum + ")"
		}
		w("- %s%s: %s\n", s.System, extra, strings.Join(parts, ", "))
	}
	w("\n")
}

func (r *results) targets(w writer) {
	w("## Against the targets\n\n")
	line := func(ok bool, known bool, text string) {
		mark := "MET"
		if !known {
			mark = "NOT MEASURED"
		} else if !ok {
			mark = "MISSED"
		}
		w("- **%s**: %s\n", mark, text)
	}
	med := func(f *figure) float64 {
		if f == nil {
			return 0
		}
		return f.Median
	}
	o100 := r.find("drain-pg", "ours (P=1)", "", "msg/s", 100)
	o1000 := r.find("drain-pg", "ours (P=1)", "", "msg/s", 1000)
	p100 := r.find("drain-pg", "plain SQL loop", "", "msg/s", 100)
	p1000 := r.find("drain-pg", "plain SQL loop", "", "msg/s", 1000)
	line(med(o1000) >= 130000, o1000 != nil, fmt.Sprintf("issue 3, PostgreSQL drain ≥ 130,000 msg/s at batch 1,000: %s msg/s (P=1)", fmtRate(med(o1000))))
	line(med(o1000)*1.5 >= med(p1000), o1000 != nil && p1000 != nil, fmt.Sprintf("issue 3, within 1.5× of the plain loop at batch 1,000: plain %s ÷ ours %s = %s", fmtRate(med(p1000)), fmtRate(med(o1000)), ratio(p1000, o1000)))
	line(med(o100)*2 >= med(p100), o100 != nil && p100 != nil, fmt.Sprintf("issue 3, within 2× of the plain loop at batch 100: plain %s ÷ ours %s = %s", fmtRate(med(p100)), fmtRate(med(o100)), ratio(p100, o100)))
	s100 := r.find("drain-sqlite", "ours (P=1)", "", "msg/s", 100)
	s1000 := r.find("drain-sqlite", "ours (P=1)", "", "msg/s", 1000)
	best := max(med(s100), med(s1000))
	line(best >= 50000, s100 != nil, fmt.Sprintf("issue 3, SQLite ≥ 50,000 msg/s: %s at batch 100, %s at batch 1,000", fmtRate(med(s100)), fmtRate(med(s1000))))
	ln := r.findPrefix("latency", "ours (P=4)", "Notify, publish-only publisher")
	var l50, l99 *figure
	if ln != nil {
		l50, l99 = ln, r.find("latency", ln.System, ln.Variant, "p99 ms", 0)
	}
	line(med(l50) <= 5, l50 != nil, fmt.Sprintf("issue 3, latency with Notify p50 ≤ 5 ms: %s ms", fmtMs(med(l50))))
	line(med(l99) <= 20, l99 != nil, fmt.Sprintf("issues 3 and 8, latency with Notify p99 ≤ 20 ms: %s ms", fmtMs(med(l99))))
	lp := r.findPrefix("latency", "ours (P=4)", "publish-only publisher (1 s poll)")
	var lp99 *figure
	if lp != nil {
		lp99 = r.find("latency", lp.System, lp.Variant, "p99 ms", 0)
	}
	line(med(lp99) <= 1010, lp99 != nil, fmt.Sprintf("issue 3, latency without Notify p99 ≤ PollInterval + 10 ms (1,010 ms): %s ms", fmtMs(med(lp99))))
	for _, batch := range []int{100, 1000} {
		o := r.find("drain-pg", "ours (P=1)", "", "msg/s", batch)
		wm := r.find("drain-pg", "Watermill SQL forwarder", "", "msg/s", batch)
		line(med(o) >= 5*med(wm), o != nil && wm != nil, fmt.Sprintf("issue 8, drain ≥ 5× Watermill's forwarder at batch %s: %s", fmtRate(float64(batch)), ratio(o, wm)))
	}
	rb := r.findPrefix("drain-pg", "River", "workers, unordered")
	r1 := r.find("drain-pg", "River", "1 worker, ordered", "msg/s", 0)
	line(med(o100) >= 10*med(rb), o100 != nil && rb != nil, fmt.Sprintf("issue 8, drain ≥ 10× River at its best worker count: ours at batch 100 ÷ River = %s (at batch 1,000: %s)", ratio(o100, rb), ratio(o1000, rb)))
	line(med(o100) >= 100*med(r1), o100 != nil && r1 != nil, fmt.Sprintf("issue 8, drain ≥ 100× River with one worker: ours at batch 100 ÷ River = %s (at batch 1,000: %s)", ratio(o100, r1), ratio(o1000, r1)))
	for _, producers := range []int{1, 16} {
		for _, k := range []int{1, 10} {
			v := fmt.Sprintf("%d msg/tx, %d producers", k, producers)
			o := r.find("publish", "ours", v, "tx/s", 0)
			wm := r.find("publish", "Watermill SQL forwarder", v, "tx/s", 0)
			rv := r.find("publish", "River", v, "tx/s", 0)
			line(med(o) >= 0.95*med(wm) && med(o) >= 0.95*med(rv), o != nil && wm != nil && rv != nil,
				fmt.Sprintf("issue 8, publish throughput no worse than either peer, allowing 5%% for run-to-run noise (%s): ours %s, Watermill %s, River %s tx/s", v, fmtRate(med(o)), fmtRate(med(wm)), fmtRate(med(rv))))
		}
	}
	for _, s := range r.Steady {
		if !strings.HasPrefix(s.System, "ours") || len(s.Samples) < 3 {
			continue
		}
		first := s.Samples[1]
		var maxT int64
		for _, x := range s.Samples[1:] {
			maxT = max(maxT, x.TotalB)
		}
		line(maxT <= 2*first.TotalB+1<<20, true, fmt.Sprintf("issues 3 and 8, table size flat in the steady state: %s after the first sample, at most %s over %.0f minutes (flat here means never above twice the first sample plus 1 MiB)", kb(first.TotalB), kb(maxT), s.Duration/60))
	}
	w("\n")
}

func cmpStr(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func vacuumNote(r *results) string {
	if len(r.Steady) == 0 || r.Steady[0].Vacuum == "" {
		return ""
	}
	return fmt.Sprintf(" The server's autovacuum is %s, so the bench stands in for it with a plain `VACUUM` of each system's message table every %s (for every system alike).",
		cmpStr(r.Machine.Autovacuum, "off"), strings.TrimPrefix(r.Steady[0].Vacuum[strings.LastIndex(r.Steady[0].Vacuum, " every ")+1:], "every "))
}
