package dbtest_test

// Reliability scenario 6: two and three relay processes on one table; the one holding
// the partitions is frozen with SIGSTOP in the middle of a delivery, past its lease, and
// resumed with SIGCONT once the others took over. The frozen one cannot confirm or record
// anything (its lease token moved on), no group is reordered, and everything committed
// is delivered.
//
// The relay processes are this test binary run again: init below turns it into one when
// OUTBOXER_CHAOS_STOP_HELPER is set, before TestMain runs.

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

const chaosStopEnv = "OUTBOXER_CHAOS_STOP_HELPER"

func init() {
	if os.Getenv(chaosStopEnv) != "" {
		os.Exit(chaosStopHelper())
	}
}

// chaosStopHelper is a relay process: it relays the "orders" outbox (4 partitions) into
// the chaos_deliveries table, printing INFLIGHT at the start of every delivery and FENCED
// when a confirmation was refused because the lease moved on, until SIGTERM.
func chaosStopHelper() int {
	lease, _ := time.ParseDuration(os.Getenv("CS_LEASE"))
	delay, _ := time.ParseDuration(os.Getenv("CS_DELAY"))
	dialect := core.Dialect(os.Getenv("CS_DIALECT"))
	db, err := sql.Open(os.Getenv("CS_DRIVER"), os.Getenv("CS_DSN"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	relay := &chaosStopRelay{db: db, dialect: dialect, pid: os.Getpid(), delay: delay, say: say}
	ob, err := core.New(core.Config{
		DB: db, Dialect: dialect, LeaseDuration: lease, Logger: testLogger(),
		Hooks: core.Hooks{OnBatchException: func(ev core.BatchEvent) {
			if errors.Is(ev.Err, core.ErrLeaseLost) {
				say("FENCED %d", ev.Partition)
			}
		}},
		Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: relay, Partitions: 4, BatchSize: 10, PollInterval: 10 * time.Millisecond,
			Retention: core.KeepFor(time.Hour),
			Backoff:   core.Backoff{Func: func(int) time.Duration { return 10 * time.Millisecond }},
		}},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	say("UP")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := ob.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// chaosStopRelay stands for a broker with a round trip of delay: it honours its context
// as a broker client does (it gives up when the context is done, and passes the context
// to the write), and writes what it delivers into chaos_deliveries, with whether the
// context's deadline had passed when the write began.
type chaosStopRelay struct {
	db      *sql.DB
	dialect core.Dialect
	pid     int
	delay   time.Duration
	say     func(string, ...any)
}

func (r *chaosStopRelay) Deliver(ctx context.Context, batch []core.Envelope) error {
	ids := make([]string, len(batch))
	for i, e := range batch {
		ids[i] = strconv.FormatInt(e.ID, 10)
	}
	r.say("INFLIGHT %d %s", batch[0].Partition, strings.Join(ids, ","))
	select {
	case <-time.After(r.delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	late := false
	if dl, ok := ctx.Deadline(); ok && time.Now().After(dl) {
		late = true
	}
	var b strings.Builder
	args := make([]any, 0, len(batch)*4)
	b.WriteString(`INSERT INTO chaos_deliveries (msg_id, grp, pid, late) VALUES `)
	n := 0
	for i, e := range batch {
		if i > 0 {
			b.WriteString(", ")
		}
		if r.dialect == core.Postgres {
			fmt.Fprintf(&b, "($%d, $%d, $%d, $%d)", n+1, n+2, n+3, n+4)
			n += 4
		} else {
			b.WriteString("(?, ?, ?, ?)")
		}
		args = append(args, e.ID, e.GroupKey, r.pid, late)
	}
	_, err := r.db.ExecContext(ctx, b.String(), args...)
	return err
}

// chaosProc is a running relay process of this scenario.
type chaosProc struct {
	cmd    *exec.Cmd
	pid    int
	up     chan struct{}
	done   chan error
	fenced atomic.Int64
	// armed: freeze the process (SIGSTOP) at the start of its next delivery, and send
	// that delivery's partition and IDs on frozen.
	armed  atomic.Bool
	frozen chan chaosInflight
}

type chaosInflight struct {
	part int
	ids  []int64
	at   time.Time
}

func chaosStartRelay(t *testing.T, db *dbtest.DB, lease, delay time.Duration) *chaosProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), chaosStopEnv+"=1",
		"CS_DRIVER="+db.Driver, "CS_DSN="+db.DSN, "CS_DIALECT="+string(db.Dialect),
		"CS_LEASE="+lease.String(), "CS_DELAY="+delay.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &chaosProc{cmd: cmd, pid: cmd.Process.Pid, up: make(chan struct{}), done: make(chan error, 1), frozen: make(chan chaosInflight, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "UP":
				close(p.up)
			case strings.HasPrefix(line, "FENCED "):
				p.fenced.Add(1)
			case strings.HasPrefix(line, "INFLIGHT ") && p.armed.CompareAndSwap(true, false):
				_ = p.cmd.Process.Signal(syscall.SIGSTOP)
				f := strings.Fields(line)
				in := chaosInflight{at: time.Now()}
				in.part, _ = strconv.Atoi(f[1])
				for _, s := range strings.Split(f[2], ",") {
					id, _ := strconv.ParseInt(s, 10, 64)
					in.ids = append(in.ids, id)
				}
				p.frozen <- in
			}
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	select {
	case <-p.up:
	case err := <-p.done:
		t.Fatalf("relay process ended before starting: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatalf("relay process did not start within 30s")
	}
	return p
}

// stop ends the process gracefully and checks that it exits cleanly.
func (p *chaosProc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			t.Errorf("relay process %d exited with %v", p.pid, err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("relay process %d did not stop within 30s of SIGTERM", p.pid)
	}
}

type chaosLease struct {
	owner string
	token int64
}

func chaosLeases(t *testing.T, db *dbtest.DB) map[int]chaosLease {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), `SELECT part, owner, token FROM `+core.DefaultTable+`_leases WHERE outbox = 'orders'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int]chaosLease{}
	for rows.Next() {
		var p int
		var l chaosLease
		if err := rows.Scan(&p, &l.owner, &l.token); err != nil {
			t.Fatal(err)
		}
		out[p] = l
	}
	return out
}

// ownedBy is whether a lease row names the process.
func (l chaosLease) ownedBy(pid int) bool { return strings.Contains(l.owner, "/"+strconv.Itoa(pid)+"/") }

func TestChaosStoppedRelay(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d relays", n), func(t *testing.T) {
			// SQLite is left out: a process frozen while it writes holds the file's only
			// write lock, and every other process waits for it.
			chaosForDialects(t, []core.Dialect{core.Postgres, core.MySQL}, func(t *testing.T, db *dbtest.DB) {
				chaosStopped(t, db, n)
			})
		})
	}
}

func chaosStopped(t *testing.T, db *dbtest.DB, relays int) {
	ctx := context.Background()
	lease := time.Duration(dbtest.Pick(1, 2)) * time.Second
	rounds := dbtest.Pick(1, 5)
	const delay = 20 * time.Millisecond
	ob := setup(t, db, core.Config{PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {Partitions: 4}}})
	id := "seq bigserial PRIMARY KEY"
	if db.Dialect == core.MySQL {
		id = "seq BIGINT AUTO_INCREMENT PRIMARY KEY"
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE chaos_deliveries (`+id+`, msg_id BIGINT NOT NULL, grp VARCHAR(255) NOT NULL, pid INT NOT NULL, late BOOLEAN NOT NULL)`); err != nil {
		t.Fatal(err)
	}

	// The first process takes every partition; the others wait as standbys.
	procs := []*chaosProc{chaosStartRelay(t, db, lease, delay)}
	eventually(t, 30*time.Second, "the first relay holding every partition", func() bool {
		n := 0
		for _, l := range chaosLeases(t, db) {
			if l.ownedBy(procs[0].pid) {
				n++
			}
		}
		return n == 4
	})
	for range relays - 1 {
		procs = append(procs, chaosStartRelay(t, db, lease, delay))
	}

	// One publisher, so commit order is ID order in every group.
	ledger := newChaosLedger()
	pubDone := make(chan struct{})
	var pubWG sync.WaitGroup
	pubWG.Go(func() {
		for i := 0; ; i += 5 {
			select {
			case <-pubDone:
				return
			case <-time.After(2 * time.Millisecond):
			}
			msgs := make([]core.Message, 5)
			for j := range msgs {
				msgs[j] = event{Seq: i + j, Group: fmt.Sprintf("g%d", (i+j)%40)}
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Errorf("begin: %v", err)
				return
			}
			envs, err := ob.PublishAll(ctx, tx, msgs)
			if err == nil {
				err = tx.Commit()
			}
			if err != nil {
				_ = tx.Rollback()
				t.Errorf("publish: %v", err)
				return
			}
			ledger.commit(envs...)
		}
	})
	stopPublishing := sync.OnceFunc(func() { close(pubDone); pubWG.Wait() })
	defer stopPublishing()

	maxSeq := func() int64 {
		var n int64
		if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) FROM chaos_deliveries`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	deliveredBy := func(ids []int64, notPid int) int {
		n := 0
		for _, id := range ids {
			var c int
			if err := db.QueryRowContext(ctx, chaosQ(db, `SELECT COUNT(*) FROM chaos_deliveries WHERE msg_id = ? AND pid <> ?`), id, notPid).Scan(&c); err != nil {
				t.Fatal(err)
			}
			if c > 0 {
				n++
			}
		}
		return n
	}

	var (
		inflight      = map[int64]bool{} // IDs of every frozen delivery
		frozenTimes   = map[int]int{}    // pid → how many times it was frozen
		worstRecover  time.Duration
		fenced        int64
		waitedResume  int // partitions whose takeover waited for the frozen process to resume
		lateWrites    int // deliveries the frozen process wrote after it was resumed
		lateDeadlined int // ... of which it began after its context's deadline
	)
	for round := range rounds {
		// The victim is the process holding the most partitions.
		before := chaosLeases(t, db)
		var victim *chaosProc
		most := 0
		for _, p := range procs {
			n := 0
			for _, l := range before {
				if l.ownedBy(p.pid) {
					n++
				}
			}
			if n > most {
				victim, most = p, n
			}
		}
		if victim == nil {
			t.Fatalf("round %d: no process holds a partition", round)
		}
		fencedBefore := victim.fenced.Load()
		victim.armed.Store(true)
		var in chaosInflight
		select {
		case in = <-victim.frozen:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: process %d delivered nothing within 30s", round, victim.pid)
		}
		for _, id := range in.ids {
			inflight[id] = true
		}
		frozenTimes[victim.pid]++
		// Another process takes the frozen delivery's partition and delivers its batch.
		eventually(t, 30*time.Second, "the frozen partition taken over", func() bool {
			l := chaosLeases(t, db)[in.part]
			return !l.ownedBy(victim.pid) && l.owner != "" && l.token > before[in.part].token
		})
		eventually(t, 30*time.Second, "the frozen batch delivered by another process", func() bool {
			return deliveredBy(in.ids, victim.pid) == len(in.ids)
		})
		worstRecover = max(worstRecover, time.Since(in.at))
		// Its other partitions, unless the freeze caught it inside a confirming
		// transaction, which keeps their lease row locked until it resumes.
		mine := []int{}
		for p, l := range before {
			if l.ownedBy(victim.pid) {
				mine = append(mine, p)
			}
		}
		deadline := time.Now().Add(3 * lease)
		for {
			now := chaosLeases(t, db)
			waiting := 0
			for _, p := range mine {
				if now[p].ownedBy(victim.pid) {
					waiting++
				}
			}
			if waiting == 0 || time.Now().After(deadline) {
				waitedResume += waiting
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		mark := maxSeq()
		if err := victim.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		// Resumed, it finishes the frozen delivery (cut by its deadline) and tries to
		// confirm: refused, as the lease token moved on.
		eventually(t, 30*time.Second, "the resumed process's confirmation refused", func() bool {
			return victim.fenced.Load() > fencedBefore
		})
		fenced += victim.fenced.Load() - fencedBefore
		after := chaosLeases(t, db)
		if l := after[in.part]; l.ownedBy(victim.pid) {
			t.Errorf("round %d: partition %d back with the frozen process (token %d)", round, in.part, l.token)
		}
		// Whatever it wrote after resuming can only be the frozen batch.
		rows, err := db.QueryContext(ctx, chaosQ(db, `SELECT msg_id, late FROM chaos_deliveries WHERE pid = ? AND seq > ?`), victim.pid, mark)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			var late bool
			if err := rows.Scan(&id, &late); err != nil {
				t.Fatal(err)
			}
			lateWrites++
			if late {
				lateDeadlined++
			}
			if !slices.Contains(in.ids, id) {
				t.Errorf("round %d: the resumed process delivered %d, outside its frozen batch", round, id)
			}
		}
		rows.Close()
		// Let the traffic flow a little before the next freeze.
		time.Sleep(lease / 2)
	}
	stopPublishing()
	want := ledger.committedCount()
	eventually(t, 120*time.Second, "every committed message delivered", func() bool {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(DISTINCT msg_id) FROM chaos_deliveries`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n >= want
	})
	for _, p := range procs {
		p.stop(t)
	}

	// SQL: every committed message is marked delivered, and no message of a frozen batch
	// has a failure recorded: the frozen process's cut delivery would have been recorded
	// as a failed attempt, had its confirmation gone through. (Other messages may have
	// failed for a passing reason, such as another test restarting the server.)
	stored := chaosStoredRows(t, db)
	otherFailures := 0
	for id := range ledger.committed {
		s, ok := stored[id]
		if !ok || s.state != 1 {
			t.Errorf("message %d: stored %v, state %d; want delivered (1)", id, ok, s.state)
		}
		switch {
		case inflight[id] && (s.attempts != 0 || s.lastErr):
			t.Errorf("message %d of a frozen batch: attempts %d, error recorded %q; the frozen process changed it", id, s.attempts, s.errText)
		case s.attempts != 0:
			otherFailures++
		}
	}
	var deliveries []dbtest.Delivery
	pids := map[int64][]int{} // per message, the processes that delivered it, in order
	rows, err := db.QueryContext(ctx, `SELECT msg_id, grp, pid FROM chaos_deliveries ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var d dbtest.Delivery
		var pid int
		if err := rows.Scan(&d.ID, &d.GroupKey, &pid); err != nil {
			t.Fatal(err)
		}
		deliveries = append(deliveries, d)
		pids[d.ID] = append(pids[d.ID], pid)
	}
	rows.Close()
	score := dbtest.Tally(dbtest.Score{Scenario: "6 relay processes, one paused", Variant: fmt.Sprintf("%d relays", relays),
		Database: chaosScore(db), Published: want, Recover: worstRecover}, ledger.committed, deliveries)
	chaosCheckTally(t, score)
	if score.Reordered != 0 {
		t.Errorf("%d first deliveries out of order within their group", score.Reordered)
	}
	// Duplicates: a frozen process may have delivered a batch in each of its partitions
	// without confirming it; whoever takes the partition delivers that batch again. So a
	// message goes at most twice, first by a process that was frozen, then by another;
	// and per frozen process and partition, at most a batch per freeze.
	// (The frozen batch itself may also come last, from the resumed process: see late
	// writes below.)
	repeated := map[[2]int]int{} // (pid, partition) → messages delivered again
	for id, by := range pids {
		if n := len(by); n > 1 && inflight[id] && frozenTimes[by[n-1]] > 0 && by[n-1] != by[n-2] {
			by = by[:n-1] // written by a resumed process after the new owner's delivery
		}
		for i := 0; i+1 < len(by); i++ {
			if frozenTimes[by[i]] == 0 || by[i+1] == by[i] {
				t.Errorf("message %d delivered by processes %v: only a frozen process's unconfirmed batch may go again, elsewhere", id, by)
				break
			}
			repeated[[2]int{by[i], core.PartitionFor(ledger.committed[id], 4)}]++
		}
	}
	for k, n := range repeated {
		if n > 10*frozenTimes[k[0]] {
			t.Errorf("process %d partition %d: %d messages delivered again, more than a batch (10) per freeze", k[0], k[1], n)
		}
	}
	score.Notes = fmt.Sprintf("%d freezes mid-delivery, lease %v; duplicates: the frozen process's unconfirmed batches, delivered again by the new owner; recover = freeze to the frozen batch delivered by another process (worst); %d confirmations refused to the resumed process; %d deliveries written by it after resuming (%d begun past its deadline: the Go runtime fires the deadline timer after the resume, racing the relay's goroutine), all of its frozen batch; %d partitions whose takeover waited for the resume (frozen inside a confirming transaction); %d other messages with a failed attempt",
		rounds, lease, fenced, lateWrites, lateDeadlined, waitedResume, otherFailures)
	dbtest.Record(t, score)
}
