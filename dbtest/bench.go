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
