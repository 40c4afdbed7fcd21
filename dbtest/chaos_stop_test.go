package dbtest_test

// Reliability scenario 6: two and three relay processes on one table; the one holding
// the partitions is frozen with SIGSTOP in the middle of a delivery, past its lease, and
// resumed with SIGCONT once the others took over. The process freezes itself, at a point
// of the delivery drawn at random (before the broker's round trip, between the deadline
// check and the write, after the write): a SIGSTOP sent from outside when the delivery
// begins may land later, inside the transaction that confirms it, whose lock on the
// partition's lease keeps the others out until the process resumes. The frozen one cannot confirm or record
// anything (its lease token moved on), no group is reordered, and everything committed
// is delivered.
//
// The relay processes are this test binary run again: init below turns it into one when
// OUTBOXER_CHAOS_STOP_HELPER is set, before TestMain runs.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
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
// the chaos_deliveries table until SIGTERM, and prints what the test needs to judge every
// repeated delivery:
//
//	INFLIGHT <unix ns> <partition> <ids>  a delivery begins
//	FROZEN <partition> <point>            the delivery just begun stops the process (SIGSTOP),
//	                                      once armed by SIGUSR1
//	UNSURE <partition> <ids>              the write failed: it may have gone through all the
//	                                      same, and the engine will deliver the batch again
//	UNCONFIRMED <partition> [<ids>]       a batch's confirmation failed (the lease moved on,
//	                                      or the database went away): it goes again; the IDs
//	                                      if the relay had written it
//	FENCED <partition>                    ... because the lease moved on
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
	relay := &chaosStopRelay{db: db, dialect: dialect, pid: os.Getpid(), delay: delay, say: say, last: map[int]string{}}
	// SIGUSR1 arms the next delivery to freeze the process; installed before UP, as
	// SIGUSR1 would otherwise end it.
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			relay.armed.Store(true)
		}
	}()
	ob, err := core.New(core.Config{
		DB: db, Dialect: dialect, LeaseDuration: lease, Logger: testLogger(),
		Hooks: core.Hooks{OnBatchException: func(ev core.BatchEvent) {
			// A partition's batches run one at a time: the last one handed over is the
			// one whose confirmation failed (its IDs if the relay wrote it: a batch it
			// did not write gives no one a reason to deliver it twice).
			say("UNCONFIRMED %d %s", ev.Partition, relay.lastBatch(ev.Partition))
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
	return runUntilTerm(ob)
}

// chaosStopRelay stands for a broker with a round trip of delay, and writes what it
// delivers into chaos_deliveries. It honours its context as a broker client does: it
// gives up when the context is done, does not begin the write once the deadline has
// passed, and passes the context to the write.
type chaosStopRelay struct {
	db      *sql.DB
	dialect core.Dialect
	pid     int
	delay   time.Duration
	say     func(string, ...any)

	mu   sync.Mutex
	last map[int]string // partition → IDs of the last batch, if it was written
	// armed: the next delivery freezes the process (see freezeAt).
	armed atomic.Bool
}

// Where an armed delivery freezes the process.
const (
	freezeBeforeRoundTrip = iota // its deadline passes while frozen: it gives up
	freezeBeforeWrite            // after the deadline check: the write lands late
	freezeAfterWrite             // written in time: the confirmation comes late
	freezePoints
)

// freeze stops the process if the delivery is armed for this point. The signal goes to
// this thread: sent to the process, the kernel hands it to another thread (the main one),
// and this goroutine could run on, return and confirm the delivery before that thread
// stops the others.
func (r *chaosStopRelay) freeze(armedAt, point, part int) {
	if armedAt == point {
		r.say("FROZEN %d %d", part, point)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		_ = syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
	}
}

func (r *chaosStopRelay) setLast(part int, ids string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last[part] = ids
}

func (r *chaosStopRelay) lastBatch(part int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last[part]
}

func (r *chaosStopRelay) Deliver(ctx context.Context, batch []core.Envelope) error {
	ids := make([]string, len(batch))
	for i, e := range batch {
		ids[i] = strconv.FormatInt(e.ID, 10)
	}
	part, list := batch[0].Partition, strings.Join(ids, ",")
	r.setLast(part, "")
	r.say("INFLIGHT %d %d %s", time.Now().UnixNano(), part, list)
	freezeAt := -1
	if r.armed.CompareAndSwap(true, false) {
		freezeAt = rand.IntN(freezePoints)
	}
	r.freeze(freezeAt, freezeBeforeRoundTrip, part)
	select {
	case <-time.After(r.delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	// The context may still look alive past its deadline: after a SIGSTOP, the round
	// trip's timer and the context's deadline timer fire together on SIGCONT, and the
	// one that cancels the context may run after this goroutine. A client that writes
	// with the deadline (a socket's write deadline) refuses then; so does this one.
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	var b strings.Builder
	args := make([]any, 0, len(batch)*3)
	b.WriteString(`INSERT INTO chaos_deliveries (msg_id, grp, pid) VALUES `)
	n := 0
	for i, e := range batch {
		if i > 0 {
			b.WriteString(", ")
		}
		if r.dialect == core.Postgres {
			fmt.Fprintf(&b, "($%d, $%d, $%d)", n+1, n+2, n+3)
			n += 3
		} else {
			b.WriteString("(?, ?, ?)")
		}
		args = append(args, e.ID, e.GroupKey, r.pid)
	}
	// A freeze between the check above and this write (or during it) still lets the
	// write land after the deadline: the sink cannot know. The test accepts it only for
	// batches that had begun before the freeze.
	r.freeze(freezeAt, freezeBeforeWrite, part)
	_, err := r.db.ExecContext(ctx, b.String(), args...)
	if err != nil {
		// The statement may have committed with its answer lost (a cancelled context, a
		// dropped connection); the engine records a failure and delivers it again.
		r.say("UNSURE %d %s", part, list)
		return err
	}
	r.setLast(part, list)
	r.freeze(freezeAt, freezeAfterWrite, part)
	return nil
}

// chaosProc is a running relay process of this scenario.
type chaosProc struct {
	*child
	fenced atomic.Int64
	// frozen has the delivery that froze the process, once armed (arm).
	frozen chan chaosInflight

	seenMu      sync.Mutex
	began       []chaosInflight       // every delivery it began, in order
	current     map[int]chaosInflight // partition → the delivery it began last
	unconfirmed map[int64]int         // ID → deliveries of it that were not confirmed (or unsure)
}

type chaosInflight struct {
	part  int
	ids   []int64
	at    time.Time // the test's clock, when it read the line
	began time.Time // the relay's clock, when the delivery began
	point int       // where the delivery froze the process (freezeBeforeRoundTrip, ...)
}

// chaosIDs parses a comma-separated list of IDs.
func chaosIDs(s string) []int64 {
	var ids []int64
	for _, f := range strings.Split(s, ",") {
		if id, err := strconv.ParseInt(f, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// begunBefore reports whether the process had begun a delivery of id before t.
func (p *chaosProc) begunBefore(id int64, t time.Time) bool {
	p.seenMu.Lock()
	defer p.seenMu.Unlock()
	for _, b := range p.began {
		if b.began.Before(t) && slices.Contains(b.ids, id) {
			return true
		}
	}
	return false
}

// takeUnconfirmed uses up one unconfirmed delivery of id by the process, if it has one.
func (p *chaosProc) takeUnconfirmed(id int64) bool {
	p.seenMu.Lock()
	defer p.seenMu.Unlock()
	if p.unconfirmed[id] == 0 {
		return false
	}
	p.unconfirmed[id]--
	return true
}

func chaosStartRelay(t *testing.T, db *dbtest.DB, lease, delay time.Duration) *chaosProc {
	t.Helper()
	env := append(os.Environ(), chaosStopEnv+"=1",
		"CS_DRIVER="+db.Driver, "CS_DSN="+db.DSN, "CS_DIALECT="+string(db.Dialect),
		"CS_LEASE="+lease.String(), "CS_DELAY="+delay.String())
	p := &chaosProc{frozen: make(chan chaosInflight, 1), unconfirmed: map[int64]int{}, current: map[int]chaosInflight{}}
	p.child = startChild(t, env, p.read)
	p.waitLine(t, "UP", 30*time.Second)
	return p
}

// read takes in a line the process printed.
func (p *chaosProc) read(line string) {
	switch {
	case strings.HasPrefix(line, "FENCED "):
		p.fenced.Add(1)
	case strings.HasPrefix(line, "UNSURE "), strings.HasPrefix(line, "UNCONFIRMED "):
		if f := strings.Fields(line); len(f) == 3 {
			p.seenMu.Lock()
			for _, id := range chaosIDs(f[2]) {
				p.unconfirmed[id]++
			}
			p.seenMu.Unlock()
		}
	case strings.HasPrefix(line, "INFLIGHT "):
		f := strings.Fields(line)
		in := chaosInflight{at: time.Now()}
		ns, _ := strconv.ParseInt(f[1], 10, 64)
		in.began = time.Unix(0, ns)
		in.part, _ = strconv.Atoi(f[2])
		in.ids = chaosIDs(f[3])
		p.seenMu.Lock()
		p.began = append(p.began, in)
		p.current[in.part] = in
		p.seenMu.Unlock()
	case strings.HasPrefix(line, "FROZEN "):
		// The partition's worker printed its INFLIGHT line before this one.
		f := strings.Fields(line)
		part, _ := strconv.Atoi(f[1])
		p.seenMu.Lock()
		in := p.current[part]
		p.seenMu.Unlock()
		in.at = time.Now()
		in.point, _ = strconv.Atoi(f[2])
		p.frozen <- in
	}
}

// arm makes the process freeze itself in its next delivery.
func (p *chaosProc) arm(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
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
func (l chaosLease) ownedBy(pid int) bool {
	return strings.Contains(l.owner, "/"+strconv.Itoa(pid)+"/")
}

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
	if _, err := db.ExecContext(ctx, `CREATE TABLE chaos_deliveries (`+id+`, msg_id BIGINT NOT NULL, grp VARCHAR(255) NOT NULL, pid INT NOT NULL)`); err != nil {
		t.Fatal(err)
	}

	// The first process takes every partition; the others wait as standbys.
	procs := []*chaosProc{chaosStartRelay(t, db, lease, delay)}
	eventually(t, 30*time.Second, "the first relay holding every partition", func() bool {
		n := 0
		for _, l := range chaosLeases(t, db) {
			if l.ownedBy(procs[0].pid()) {
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
		inflight     = map[int64]bool{} // IDs of every frozen delivery
		resumedSeq   = map[int64]bool{} // rows a frozen process wrote after its resume
		worstRecover time.Duration
		fenced       int64
		waitedResume int // partitions whose takeover waited for the frozen process to resume
		lateWrites   int // deliveries the frozen process wrote after it was resumed
		points       [freezePoints]int
	)
	for round := range rounds {
		// The victim is the process holding the most partitions.
		before := chaosLeases(t, db)
		var victim *chaosProc
		most := 0
		for _, p := range procs {
			n := 0
			for _, l := range before {
				if l.ownedBy(p.pid()) {
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
		victim.arm(t)
		var in chaosInflight
		select {
		case in = <-victim.frozen:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: process %d delivered nothing within 30s", round, victim.pid())
		}
		for _, id := range in.ids {
			inflight[id] = true
		}
		points[in.point]++
		t.Logf("round %d: process %d frozen at point %d of a delivery of partition %d (%d messages)", round, victim.pid(), in.point, in.part, len(in.ids))
		// Another process takes the frozen delivery's partition and delivers its batch.
		eventually(t, 30*time.Second, "the frozen partition taken over", func() bool {
			l := chaosLeases(t, db)[in.part]
			return !l.ownedBy(victim.pid()) && l.owner != "" && l.token > before[in.part].token
		})
		until := time.Now().Add(30 * time.Second)
		for deliveredBy(in.ids, victim.pid()) != len(in.ids) {
			if time.Now().After(until) {
				stored := chaosStoredRows(t, db)
				for _, id := range in.ids {
					var by []string
					rows, err := db.QueryContext(ctx, chaosQ(db, `SELECT seq, pid FROM chaos_deliveries WHERE msg_id = ? ORDER BY seq`), id)
					if err != nil {
						t.Fatal(err)
					}
					for rows.Next() {
						var seq, pid int64
						_ = rows.Scan(&seq, &pid)
						by = append(by, fmt.Sprintf("seq %d pid %d", seq, pid))
					}
					rows.Close()
					t.Logf("message %d: %+v; delivered %v", id, stored[id], by)
				}
				t.Logf("leases: %+v", chaosLeases(t, db))
				victim.mu.Lock()
				for _, l := range victim.lines[max(0, len(victim.lines)-30):] {
					t.Logf("victim: %.120s", l)
				}
				victim.mu.Unlock()
				t.Fatalf("round %d: the frozen batch not delivered by another process within 30s", round)
			}
			time.Sleep(5 * time.Millisecond)
		}
		worstRecover = max(worstRecover, time.Since(in.at))
		// Its other partitions, unless the freeze caught it inside a confirming
		// transaction, which keeps their lease row locked until it resumes.
		mine := []int{}
		for p, l := range before {
			if l.ownedBy(victim.pid()) {
				mine = append(mine, p)
			}
		}
		deadline := time.Now().Add(3 * lease)
		for {
			now := chaosLeases(t, db)
			waiting := 0
			for _, p := range mine {
				if now[p].ownedBy(victim.pid()) {
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
		resumedAt := time.Now() // it began nothing since the freeze
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
		if l := after[in.part]; l.ownedBy(victim.pid()) {
			t.Errorf("round %d: partition %d back with the frozen process (token %d)", round, in.part, l.token)
		}
		// Whatever it wrote after resuming can only come from deliveries it had begun
		// before the freeze: the one that triggered it, or another partition's that was
		// under way (a freeze between the relay's deadline check and its write, which no
		// relay can rule out). Its lines up to FENCED, printed after the resume, are read,
		// so every delivery it began before the freeze is known.
		rows, err := db.QueryContext(ctx, chaosQ(db, `SELECT seq, msg_id FROM chaos_deliveries WHERE pid = ? AND seq > ?`), victim.pid(), mark)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var seq, id int64
			if err := rows.Scan(&seq, &id); err != nil {
				t.Fatal(err)
			}
			lateWrites++
			resumedSeq[seq] = true
			inflight[id] = true
			if !victim.begunBefore(id, resumedAt) {
				t.Errorf("round %d: the resumed process delivered %d, which it had not begun before its freeze", round, id)
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
		// The sink is not enough: a frozen batch can be in it while another node has yet
		// to deliver it again and confirm it.
		c, err := ob.Counts(ctx, "orders")
		return n >= want && err == nil && c.Pending == 0
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
	type by struct {
		pid int
		seq int64
	}
	history := map[int64][]by{} // per message, who delivered it, in order
	rows, err := db.QueryContext(ctx, `SELECT seq, msg_id, grp, pid FROM chaos_deliveries ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var d dbtest.Delivery
		var b by
		if err := rows.Scan(&b.seq, &d.ID, &d.GroupKey, &b.pid); err != nil {
			t.Fatal(err)
		}
		deliveries = append(deliveries, d)
		history[d.ID] = append(history[d.ID], b)
	}
	rows.Close()
	score := dbtest.Tally(dbtest.Score{Scenario: "6 relay processes, one paused", Variant: fmt.Sprintf("%d relays", relays),
		Database: chaosScore(db), Published: want, Recover: worstRecover}, ledger.committed, deliveries)
	chaosCheckTally(t, score)
	if score.Reordered != 0 {
		t.Errorf("%d first deliveries out of order within their group", score.Reordered)
	}
	// Duplicates: a message goes again only after a delivery that was not confirmed
	// (at least once): a frozen process's batch whose confirmation the resume found
	// fenced, or any process's batch whose confirmation failed or whose write failed
	// with its outcome unknown (a passing fault: a busy machine letting a lease run out,
	// another test restarting the server or killing sessions). Each relay process says
	// which batches those were; every repeat uses up one of them. The one other repeat
	// is a resumed process's write of a delivery it had begun before its freeze.
	byPid := map[int]*chaosProc{}
	for _, p := range procs {
		byPid[p.pid()] = p
	}
	unconfirmedRepeats := 0
	for id, h := range history {
		for i := 1; i < len(h); i++ {
			switch {
			case resumedSeq[h[i].seq]:
			case byPid[h[i-1].pid].takeUnconfirmed(id):
				if !inflight[id] {
					unconfirmedRepeats++
				}
			default:
				pids := make([]int, len(h))
				for j, b := range h {
					pids[j] = b.pid
				}
				t.Errorf("message %d delivered by processes %v: delivery %d follows a confirmed delivery", id, pids, i+1)
			}
		}
	}
	score.Notes = fmt.Sprintf("%d freezes mid-delivery (%d before the broker round trip, %d between the deadline check and the write, %d after the write), lease %v; duplicates: the frozen process's unconfirmed batches, delivered again by the new owner; recover = freeze to the frozen batch delivered by another process (worst); %d confirmations refused to the resumed process; %d deliveries written by it after resuming (a freeze between its deadline check and its write), all begun before the freeze; %d partitions whose takeover waited for the resume (frozen inside a confirming transaction); %d other messages with a failed attempt; %d repeats outside frozen batches after a failed confirmation",
		rounds, points[freezeBeforeRoundTrip], points[freezeBeforeWrite], points[freezeAfterWrite], lease, fenced, lateWrites, waitedResume, otherFailures, unconfirmedRepeats)
	dbtest.Record(t, score)
}
