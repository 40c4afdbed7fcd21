package dbtest_test

// Scenario 3 of the reliability suite: a relay process is SIGKILLed after exactly k of
// the n messages of a batch reached the sink (the process kills itself right after the
// k-th acknowledgement, see tableRelay.recordAndDie), at random k, round after round.
// The next process takes the partitions over once the dead one's leases run out. What
// a user depends on: every message arrives, only the killed batches arrive twice, and a
// killed batch comes again whole and in order before anything after it.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

func TestChaosCrashMidBatch(t *testing.T) {
	dbtest.ForEach(t, crashMidBatch)
}

// crashKill is one round: the process, its killed batch and what of it reached the sink.
type crashKill struct {
	pid, batch, part, k int
	ids                 []int64
	died                time.Time
}

// crashDelivery is a row of the deliveries table with its batch column.
type crashDelivery struct {
	msgID      int64
	grp        string
	pid, batch int
}

func crashMidBatch(t *testing.T, db *dbtest.DB) {
	ctx := context.Background()
	const n = 20 // batch size
	rounds := dbtest.Pick(3, 40*max(1, dbtest.ChaosScale()))
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 7))
	t.Logf("%d rounds, seed %d", rounds, seed)

	ob := setup(t, db, core.Config{PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {Partitions: 2}}})
	crashTables(t, db)
	// Each process delivers at most its kill batch and two before it (of either partition):
	// the backlog outlasts every round, so every batch is full.
	total := rounds*3*n + 4*n
	var published []core.Envelope
	for i := 0; i < total; i += 100 {
		msgs := make([]core.Message, min(100, total-i))
		for j := range msgs {
			msgs[j] = event{Seq: i + j, Group: fmt.Sprintf("order:%d", (i+j)%16)}
		}
		published = append(published, publish(t, ob, db.DB, msgs...)...)
	}
	partOf := map[int64]int{}
	committed := map[int64]string{}
	for _, e := range published {
		partOf[e.ID] = e.Partition
		committed[e.ID] = e.GroupKey
	}

	cfg := helperFor(db)
	cfg.Partitions, cfg.BatchSize, cfg.Lease, cfg.BatchColumn = 2, n, time.Second, true
	var (
		kills    []crashKill
		recovery time.Duration // worst: from a death to the next process's first delivery
		ks       []string
	)
	firstAfter := func(p *child) {
		p.waitLine(t, "FIRST", 60*time.Second)
		if len(kills) > 0 {
			recovery = max(recovery, time.Since(kills[len(kills)-1].died))
		}
	}
	for r := range rounds {
		k := rng.IntN(n + 1)
		switch r {
		case 0:
			k = 0 // killed before the sink saw anything of the batch
		case 1:
			k = n // the sink saw all of it, the outbox confirmed none
		}
		// At least one batch before the kill batch: a process dies after some traffic.
		cfg.KillBatch, cfg.KillAcks = 2+rng.IntN(2), k
		victim := startRelay(t, cfg)
		firstAfter(victim)
		c := parseCrashKill(t, victim.waitLine(t, "KILL ", 60*time.Second))
		c.pid = victim.cmd.Process.Pid
		crashWaitKilled(t, victim)
		c.died = time.Now()
		kills = append(kills, c)
		ks = append(ks, strconv.Itoa(c.k))
		// The dead process could not withdraw its claim on the partition (a broker would
		// not care); the next process must not be reported as a second server.
		if _, err := db.ExecContext(ctx, crashQ(db, `DELETE FROM active WHERE pid = ?`), c.pid); err != nil {
			t.Fatal(err)
		}
	}
	cfg.KillBatch, cfg.KillAcks = 0, 0
	heir := startRelay(t, cfg)
	firstAfter(heir)
	eventually(t, 120*time.Second, "every message after the last kill", func() bool { return allConfirmed(t, db, ob, "orders", total) })
	heir.stop(t)

	ds := crashDeliveries(t, db)
	victims := map[int]bool{}
	for _, c := range kills {
		victims[c.pid] = true
	}
	// The last batch each process handed over in each partition: the only one a SIGKILL
	// can have left unconfirmed.
	type pidPart struct{ pid, part int }
	last := map[pidPart]int{}
	for _, d := range ds {
		pp := pidPart{d.pid, partOf[d.msgID]}
		last[pp] = max(last[pp], d.batch)
	}
	mayRepeat := map[int64]bool{}
	for _, d := range ds {
		if victims[d.pid] && d.batch == last[pidPart{d.pid, partOf[d.msgID]}] {
			mayRepeat[d.msgID] = true
		}
	}
	for r, c := range kills {
		// Exactly the first k messages of the killed batch reached the sink from it.
		var got []int64
		for _, d := range ds {
			if d.pid == c.pid && d.batch == c.batch {
				got = append(got, d.msgID)
			}
		}
		if want := c.ids[:c.k]; !slices.Equal(got, want) {
			t.Errorf("process %d, batch %d: the sink recorded %v, want the first %d of the batch %v", c.pid, c.batch, got, c.k, want)
		}
		// The first process after this one to deliver anything in the partition starts
		// with the whole killed batch again, in its order (or with the first k' of it, when
		// it was killed in that same batch in turn).
		later := append([]int{}, crashPids(kills[r+1:])...)
		later = append(later, heir.cmd.Process.Pid)
		var next, want []int64
		for i, pid := range later {
			for _, d := range ds {
				if d.pid == pid && partOf[d.msgID] == c.part && len(next) < len(c.ids) {
					next = append(next, d.msgID)
				}
			}
			if len(next) > 0 {
				want = c.ids
				if i < len(kills)-r-1 {
					if k2 := kills[r+1+i]; k2.part == c.part && slices.Equal(k2.ids, c.ids) {
						want = c.ids[:k2.k]
						next = next[:min(len(next), k2.k)]
					}
				}
				break
			}
		}
		if !slices.Equal(next, want) {
			t.Errorf("after process %d died in batch %d (partition %d), the partition went on with %v, want %v of the killed batch again", c.pid, c.batch, c.part, next, want)
		}
	}
	// Only an unconfirmed batch comes again: every delivery that was repeated later
	// belongs to the last batch a killed process had in that partition.
	lastOf := map[int64]int{}
	for i, d := range ds {
		lastOf[d.msgID] = i
	}
	for i, d := range ds {
		if lastOf[d.msgID] == i {
			continue
		}
		if !victims[d.pid] || d.batch != last[pidPart{d.pid, partOf[d.msgID]}] {
			t.Errorf("message %d was delivered again after its delivery in batch %d of process %d, which was not a killed process's last batch", d.msgID, d.batch, d.pid)
		}
	}
	checkDeliveries(t, db, published, mayRepeat)
	if t.Failed() {
		for _, c := range kills {
			t.Logf("kill: process %d batch %d partition %d k %d ids %v", c.pid, c.batch, c.part, c.k, c.ids)
		}
		for _, d := range ds {
			t.Logf("delivery: %d %s part %d pid %d batch %d", d.msgID, d.grp, partOf[d.msgID], d.pid, d.batch)
		}
	}
	if c := counts(t, ob, "orders"); c.Pending != 0 || c.Dead != 0 {
		t.Errorf("counts after the last delivery: %+v, want nothing pending or dead", c)
	}

	score := dbtest.Score{Scenario: "3 crash mid-batch", Variant: fmt.Sprintf("SIGKILL after k of %d acks, 2 partitions", n),
		Database: string(db.Dialect), Published: total, Recover: recovery,
		Notes: fmt.Sprintf("%d kills, k = %s; lease %v; recover includes the dead process's lease", len(kills), strings.Join(ks, ","), cfg.Lease)}
	deliveredInOrder := make([]dbtest.Delivery, len(ds))
	for i, d := range ds {
		deliveredInOrder[i] = dbtest.Delivery{ID: d.msgID, GroupKey: d.grp}
	}
	score = dbtest.Tally(score, committed, deliveredInOrder)
	if score.Lost != 0 || score.Reordered != 0 || score.Phantom != 0 {
		t.Errorf("lost %d, reordered %d, phantom %d: want none", score.Lost, score.Reordered, score.Phantom)
	}
	var acked int
	for _, c := range kills {
		acked += c.k
	}
	if score.Duplicated < acked {
		t.Errorf("%d duplicates, fewer than the %d messages the killed batches had acknowledged", score.Duplicated, acked)
	}
	dbtest.Record(t, score)
}

// crashTables creates the relay processes' tables, with the batch column.
func crashTables(t *testing.T, db *dbtest.DB) {
	t.Helper()
	relayTables(t, db)
	if _, err := db.ExecContext(context.Background(), `ALTER TABLE deliveries ADD COLUMN batch INT NOT NULL DEFAULT 0`); err != nil {
		t.Fatal(err)
	}
}

func crashQ(db *dbtest.DB, q string) string { return placeholders(db.Dialect, q) }

func crashDeliveries(t *testing.T, db *dbtest.DB) []crashDelivery {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), `SELECT msg_id, grp, pid, batch FROM deliveries ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []crashDelivery
	for rows.Next() {
		var d crashDelivery
		if err := rows.Scan(&d.msgID, &d.grp, &d.pid, &d.batch); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// parseCrashKill reads "KILL batch=B part=P k=K ids=1,2,3".
func parseCrashKill(t *testing.T, line string) crashKill {
	t.Helper()
	var c crashKill
	for _, f := range strings.Fields(strings.TrimPrefix(line, "KILL ")) {
		key, val, _ := strings.Cut(f, "=")
		var err error
		switch key {
		case "batch":
			c.batch, err = strconv.Atoi(val)
		case "part":
			c.part, err = strconv.Atoi(val)
		case "k":
			c.k, err = strconv.Atoi(val)
		case "ids":
			for _, s := range strings.Split(val, ",") {
				id, perr := strconv.ParseInt(s, 10, 64)
				if perr != nil {
					err = perr
				}
				c.ids = append(c.ids, id)
			}
		}
		if err != nil {
			t.Fatalf("bad KILL line %q: %v", line, err)
		}
	}
	if len(c.ids) == 0 {
		t.Fatalf("bad KILL line %q", line)
	}
	return c
}

// crashWaitKilled waits for the process to end and checks that SIGKILL ended it.
func crashWaitKilled(t *testing.T, p *child) {
	t.Helper()
	select {
	case <-p.done:
		err := p.err
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("relay process ended with %v, want SIGKILL", err)
		}
		if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("relay process ended with %v, want SIGKILL", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("relay process did not die within 30s of its KILL line")
	}
}

func crashPids(kills []crashKill) []int {
	pids := make([]int, len(kills))
	for i, c := range kills {
		pids[i] = c.pid
	}
	return pids
}
