package dbtest

import (
	"slices"
	"testing"
	"time"
)

// Interleave times variants of one piece of work under the same conditions: every
// iteration of b runs each variant once, in an order that rotates from one iteration to
// the next, and Interleave returns each variant's median duration. A database's commit
// time drifts over a run (checkpoints, table growth, other load on the machine), so
// variants timed minutes apart in sub-benchmarks of their own are not comparable; timed
// in turn, they are.
func Interleave(b *testing.B, variants ...func() error) []time.Duration {
	b.Helper()
	took := make([][]time.Duration, len(variants))
	turn := 0
	for b.Loop() {
		turn++
		for k := range variants {
			v := (k + turn) % len(variants)
			start := time.Now()
			if err := variants[v](); err != nil {
				b.Fatalf("variant %d: %v", v, err)
			}
			took[v] = append(took[v], time.Since(start))
		}
	}
	med := make([]time.Duration, len(variants))
	for v, t := range took {
		if len(t) == 0 {
			continue
		}
		slices.Sort(t)
		med[v] = t[len(t)/2]
	}
	return med
}

// Micros is d in microseconds, for b.ReportMetric.
func Micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// ReportPublish reports the publish benchmarks' metrics from the medians of six variants
// of a business transaction, in this order: bare, with a hand-written INSERT of an outbox
// row, with Publish, with PublishAll of ten messages, with the hand-written INSERT …
// RETURNING the row's ID, and with a hand-written INSERT of ten rows. Each variant's cost
// is what it adds to the bare one; further variants are the caller's to report.
func ReportPublish(b *testing.B, med []time.Duration) {
	b.Helper()
	added := func(v int) float64 { return Micros(med[v] - med[0]) }
	b.ReportMetric(Micros(med[0]), "bare-µs")
	b.ReportMetric(added(1), "plain-added-µs")
	b.ReportMetric(added(2), "publish1-added-µs")
	b.ReportMetric(added(3), "publish10-added-µs")
	b.ReportMetric(added(2)/added(1), "publish1/plain")
	b.ReportMetric(added(3)/added(2), "publish10/publish1")
	b.ReportMetric(added(4)/added(1), "returning/plain")
	b.ReportMetric(added(5)/added(1), "plain10/plain")
}
