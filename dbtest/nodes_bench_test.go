package dbtest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// nodesBenchEnv runs TestRelayNodesThroughput: "quick" or "full".
const nodesBenchEnv = "OUTBOXER_NODES_BENCH"

// TestRelayNodesThroughput is the benchmark of relay nodes: a relay-bound workload, where
// each relay process may deliver at most a fixed rate (a token bucket per process,
// standing for its connection to the broker), 8 partitions, a backlog of 100,000 (20,000
// quick). It measures the throughput of 1, 2 and 3 relay processes in the same run, the
// time the partitions take to balance after the others join the first, and the pause of
// each moved partition (the old owner's last batch to the new owner's first).
//
//	OUTBOXER_NODES_BENCH=full go test -run TestRelayNodesThroughput -v -timeout 30m .
func TestRelayNodesThroughput(t *testing.T) {
	mode := os.Getenv(nodesBenchEnv)
	if mode == "" {
		t.Skip("a benchmark: set " + nodesBenchEnv + "=quick or full")
	}
	backlog, rounds := 100_000, 3
	if mode == "quick" {
		backlog, rounds = 20_000, 1
	}
	const rate, parts = 5_000, 8
	db := dbtest.Open(t, core.Postgres)
	ob := setup(t, db, core.Config{PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {Partitions: parts}}})
	cfg := nodesConfigFor(db)
	cfg.Partitions, cfg.Rate, cfg.Batch, cfg.NoWrite = parts, rate, 100, true
	cfg.Lease = 20 * time.Second // the default

	thr := map[int][]float64{}
	bal := map[int][]time.Duration{}
	var pauses []time.Duration
	for r := range rounds {
		order := []int{1, 2, 3}
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, n := range order {
			x, b, ps := nodesBenchRun(t, ob, db, cfg, n, backlog)
			t.Logf("round %d, %d nodes: %.0f msg/s, balanced %v after the join, %d moves", r+1, n, x, b.Round(time.Millisecond), len(ps))
			thr[n] = append(thr[n], x)
			if n > 1 {
				bal[n] = append(bal[n], b)
			}
			pauses = append(pauses, ps...)
		}
	}
	med := func(xs []float64) float64 { s := slices.Clone(xs); slices.Sort(s); return s[len(s)/2] }
	var b strings.Builder
	fmt.Fprintf(&b, "| relay processes | msg/s (median of %d) | min–max | ÷ 1 process | balanced after the join |\n| --- | --- | --- | --- | --- |\n", rounds)
	base := med(thr[1])
	for n := 1; n <= 3; n++ {
		joined := "–"
		if n > 1 {
			joined = percentile(bal[n], 0.5).Round(time.Millisecond).String()
		}
		fmt.Fprintf(&b, "| %d | %.0f | %.0f–%.0f | %.2f× | %s |\n", n, med(thr[n]), slices.Min(thr[n]), slices.Max(thr[n]), med(thr[n])/base, joined)
	}
	fmt.Fprintf(&b, "\npause per moved partition (%d graceful moves): p50 %v, p99 %v, max %v\n", len(pauses),
		percentile(pauses, 0.5).Round(time.Millisecond), percentile(pauses, 0.99).Round(time.Millisecond),
		slices.Max(append(pauses, 0)).Round(time.Millisecond))
	t.Logf("%d partitions, backlog %d, %d msg/s per relay process:\n%s", parts, backlog, rate, b.String())
}

// nodesBenchRun publishes the backlog, starts one relay process, then n-1 more once it
// holds every partition, and measures the throughput from the moment the partitions are
// balanced until the backlog is delivered.
func nodesBenchRun(t *testing.T, ob *core.Outboxer, db *dbtest.DB, cfg nodesConfig, n, backlog int) (float64, time.Duration, []time.Duration) {
	ctx := context.Background()
	for i := 0; i < backlog; i += 1000 {
		msgs := make([]core.Message, min(1000, backlog-i))
		for j := range msgs {
			msgs[j] = event{Seq: i + j, Group: fmt.Sprintf("g%d", (i+j)%1000)}
		}
		if _, err := ob.PublishAll(ctx, db.DB, msgs); err != nil {
			t.Fatal(err)
		}
	}
	// The server's autovacuum may be off (it is on the bench machine): the rows the last
	// run deleted would slow every fetch of this one.
	if _, err := db.ExecContext(ctx, `VACUUM ANALYZE outboxer_messages`); err != nil {
		t.Fatal(err)
	}
	first := startNode(t, cfg)
	procs := []*nodeProc{first}
	waitBalanced(t, ob, procs, []int{cfg.Partitions}, first.started, 60*time.Second)
	joined := time.Now()
	for range n - 1 {
		procs = append(procs, startNode(t, cfg))
	}
	want := make([]int, n)
	for i := range cfg.Partitions {
		want[i%n]++
	}
	balance := time.Duration(0)
	if n > 1 {
		balance = waitBalanced(t, ob, procs, want, joined, 60*time.Second)
	}
	t0 := time.Now()
	p0 := counts(t, ob, "orders").Pending
	// Counting the backlog would load the database; whether a pending row is left is cheap.
	left := func() bool {
		var one int
		err := db.QueryRowContext(ctx, `SELECT 1 FROM outboxer_messages WHERE outbox = 'orders' AND state IN (0, 3, 4) LIMIT 1`).Scan(&one)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			t.Fatal(err)
		}
		return err == nil
	}
	for left() {
		time.Sleep(20 * time.Millisecond)
	}
	elapsed := time.Since(t0)
	for _, p := range procs {
		p.stop(t)
	}
	var pauses []time.Duration
	for _, m := range handovers(procs, nil) {
		pauses = append(pauses, m.pause)
	}
	return float64(p0) / elapsed.Seconds(), balance, pauses
}
