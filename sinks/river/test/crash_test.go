package riversink_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"

	"github.com/outboxer-go/outboxer/core"
	riversink "github.com/outboxer-go/outboxer/sinks/river"
)

// The crash test runs the engine in child processes: this test binary started again with
// crashChildEnv set to the child's role. TestMain hands such a process to crashChild.
const (
	crashChildEnv  = "OUTBOXER_RIVER_CRASH_CHILD" // "block" or "finish"
	crashDSNEnv    = "OUTBOXER_RIVER_CRASH_DSN"
	crashSchemaEnv = "OUTBOXER_RIVER_CRASH_SCHEMA"

	crashOutbox     = "orders"
	crashPartitions = 2
	crashBatchSize  = 50
	crashBlockAt    = 3 // the "block" child freezes in this DeliverTx call (from 1) or a later one
	crashLease      = 2 * time.Second
)

// crashConfig is the engine configuration both children run with.
func crashConfig(db *sql.DB, relay core.Relay, logger *slog.Logger) core.Config {
	return core.Config{
		DB:            db,
		Logger:        logger,
		LeaseDuration: crashLease,
		Outboxes: map[string]core.OutboxConfig{crashOutbox: {
			Relay: relay, Partitions: crashPartitions, BatchSize: crashBatchSize, PollInterval: 50 * time.Millisecond,
		}},
	}
}

// freezingSink is the River TxSink of the "block" child. One DeliverTx, from the
// crashBlockAt-th call on, inserts the batch's jobs in the engine's transaction, reports
// that it is inside ("inside <backend pid> <id>,<id>,…" on stdout) and then keeps the
// transaction busy until the process is killed: a process that dies in the middle of a
// delivery, with the jobs written and the outbox rows not yet removed.
//
// It freezes only once every partition has had a batch: the engine refuses to start on
// a table whose partitions were not all owned yet while messages are pending (it takes
// that for a changed partition count), which a process killed earlier would leave.
type freezingSink struct {
	*riversink.TxSink
	out io.Writer

	mu     sync.Mutex
	calls  int
	seen   map[int]bool
	frozen bool
}

func (s *freezingSink) freezeNow(batch []core.Envelope) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	s.seen[batch[0].Partition] = true
	if s.frozen || s.calls < crashBlockAt || len(s.seen) < crashPartitions {
		return false
	}
	s.frozen = true
	return true
}

func (s *freezingSink) DeliverTx(ctx context.Context, tx *sql.Tx, batch []core.Envelope) error {
	if !s.freezeNow(batch) {
		return s.TxSink.DeliverTx(ctx, tx, batch)
	}
	var pid int
	if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		return err
	}
	if err := s.TxSink.DeliverTx(ctx, tx, batch); err != nil {
		return err
	}
	// When the client is gone, the server notices it within 100 ms even in the middle
	// of the statement below, and rolls the transaction back.
	if _, err := tx.ExecContext(ctx, `SET LOCAL client_connection_check_interval = 100`); err != nil {
		return err
	}
	ids := make([]string, len(batch))
	for i, e := range batch {
		ids[i] = strconv.FormatInt(e.ID, 10)
	}
	fmt.Fprintf(s.out, "inside %d %s\n", pid, strings.Join(ids, ","))
	// A statement that outlives the delivery's deadline: database/sql cannot roll the
	// transaction back while it runs, so it is still open when the process is killed.
	_, err := tx.ExecContext(context.Background(), `SELECT pg_sleep(60)`)
	return fmt.Errorf("still alive after the freeze: %w", err)
}

// crashChild runs the engine as the given role and returns the exit code. Either role
// exits when its stdin is closed: a child never outlives the test that started it.
func crashChild(role string) int {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "crash child %s: %v\n", role, err)
		return 1
	}
	db, err := sql.Open("pgx", os.Getenv(crashDSNEnv))
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	inserter, err := river.NewClient(riverdatabasesql.New(nil), &river.Config{Schema: os.Getenv(crashSchemaEnv)})
	if err != nil {
		return fail(err)
	}
	sink, err := riversink.NewTx(inserter, riversink.Options{})
	if err != nil {
		return fail(err)
	}
	var relay core.Relay = sink
	if role == "block" {
		relay = &freezingSink{TxSink: sink, out: os.Stdout, seen: map[int]bool{}}
	}
	ob, err := core.New(crashConfig(db, relay, logger))
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdinClosed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	ran := make(chan error, 1)
	go func() { ran <- ob.Run(ctx) }()

	if role == "block" {
		select {
		case <-stdinClosed:
			return 3
		case err := <-ran:
			return fail(fmt.Errorf("Run returned before the freeze: %v", err))
		}
	}
	// "finish": run until nothing is pending, then stop gracefully.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stdinClosed:
			return 3
		case err := <-ran:
			return fail(fmt.Errorf("Run returned early: %v", err))
		case <-tick.C:
		}
		c, err := ob.Counts(ctx, crashOutbox)
		if err != nil {
			return fail(err)
		}
		if c.Pending == 0 {
			cancel()
			if err := <-ran; err != nil {
				return fail(err)
			}
			fmt.Printf("done dead=%d\n", c.Dead)
			return 0
		}
	}
}

// child is a running crash child with its stdout as lines.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // closed at EOF
	stderr *syncBuffer
}

type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func startChild(t *testing.T, ctx context.Context, role string, db *riverDB) *child {
	t.Helper()
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), crashChildEnv+"="+role, crashDSNEnv+"="+db.DSN, crashSchemaEnv+"="+db.Schema)
	c := &child{cmd: cmd, lines: make(chan string, 64), stderr: &syncBuffer{}}
	cmd.Stderr = c.stderr
	var err error
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s child: %v", role, err)
	}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		c.stdin.Close()
		if c.cmd.ProcessState == nil {
			_ = c.cmd.Process.Kill()
			c.wait()
		}
		if t.Failed() {
			t.Logf("%s child's stderr:\n%s", role, c.stderr.String())
		}
	})
	return c
}

// line returns the child's next line of output, or fails the test when the child ends
// or ctx is done first.
func (c *child) line(t *testing.T, ctx context.Context) string {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			c.wait()
			t.Fatalf("child ended (%v) without saying what it did; stderr:\n%s", c.cmd.ProcessState, c.stderr.String())
		}
		return l
	case <-ctx.Done():
		t.Fatalf("no word from the child in time; stderr:\n%s", c.stderr.String())
	}
	return ""
}

// wait reads the rest of the output and reaps the process.
func (c *child) wait() error {
	for range c.lines {
	}
	return c.cmd.Wait()
}

// TestCrashInsideDeliverTxHandsOffExactlyOnce proves the same-database handoff: an
// engine process killed (SIGKILL) while a batch is inside DeliverTx, with its River jobs
// inserted but the transaction not committed, leaves neither visible jobs nor missing
// rows behind; a second process takes the partitions over once the dead one's leases
// run out and finishes the run. In the end every outbox message has exactly one River
// job, each group's jobs are in outbox order, and nothing is pending.
func TestCrashInsideDeliverTxHandsOffExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the engine in two child processes")
	}
	db := newRiverDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The outbox table and 1,000 messages in 20 groups, committed before any child runs.
	pub, err := core.New(core.Config{DB: db.DB.DB, PublishOnly: true, LeaseDuration: crashLease,
		Outboxes: map[string]core.OutboxConfig{crashOutbox: {Partitions: crashPartitions}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	const total, groups = 1000, 20
	msgs := make([]core.Message, total)
	for i := range msgs {
		msgs[i] = core.Raw{To: crashOutbox, Type: "order.placed", Key: fmt.Sprintf("order:%d", i%groups), Data: fmt.Appendf(nil, `{"i":%d}`, i)}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	envs, err := pub.PublishAll(ctx, tx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	published := ids(envs)

	// First child: freezes inside its third DeliverTx.
	first := startChild(t, ctx, "block", db)
	pid, frozen := parseInside(t, first.line(t, ctx))

	// Inside: the transaction is open and its jobs are invisible to everyone else.
	var state string
	if err := db.QueryRowContext(ctx, `SELECT state FROM pg_stat_activity WHERE pid = $1 AND xact_start IS NOT NULL`, pid).Scan(&state); err != nil {
		t.Fatalf("the frozen delivery's transaction (backend %d) is not open: %v", pid, err)
	}
	before := jobCounts(t, db)
	for id := range frozen {
		if before[id] != 0 {
			t.Fatalf("job for message %d of the uncommitted batch is visible", id)
		}
	}
	if len(before) < crashBatchSize {
		t.Fatalf("%d job(s) committed before the freeze, want the earlier batches' (at least %d)", len(before), crashBatchSize)
	}
	statusBefore, err := pub.Status(ctx, crashOutbox)
	if err != nil {
		t.Fatal(err)
	}

	// Kill it mid-delivery; the server aborts its transaction.
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.wait()
	if !waitFor(ctx, 50*time.Millisecond, func() bool {
		var gone bool
		err := db.QueryRowContext(ctx, `SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)`, pid).Scan(&gone)
		return err == nil && gone
	}) {
		t.Fatalf("backend %d of the killed child is still there", pid)
	}
	after := jobCounts(t, db)
	for id := range frozen {
		if after[id] != 0 {
			t.Fatalf("job for message %d of the killed batch was committed", id)
		}
	}
	if c, err := pub.Counts(ctx, crashOutbox); err != nil || c.Pending+int64(len(after)) != total {
		t.Fatalf("after the kill: counts %+v (%v) and %d job(s), want them to add up to %d", c, err, len(after), total)
	}

	// Second child: takes the partitions over once the leases expired, finishes the run.
	second := startChild(t, ctx, "finish", db)
	if l := second.line(t, ctx); l != "done dead=0" {
		t.Fatalf("second child said %q, want done with no dead message", l)
	}
	if err := second.wait(); err != nil {
		t.Fatalf("second child: %v; stderr:\n%s", err, second.stderr.String())
	}

	final := jobCounts(t, db)
	for _, id := range published {
		if final[id] != 1 {
			t.Errorf("message %d has %d River job(s), want exactly one", id, final[id])
		}
	}
	if len(final) != total {
		t.Errorf("jobs for %d distinct outbox ids, want %d", len(final), total)
	}
	if c, err := pub.Counts(ctx, crashOutbox); err != nil || c.Pending != 0 || c.Dead != 0 {
		t.Errorf("counts after the run: %+v, %v; want nothing pending or dead", c, err)
	}
	checkGroupOrder(t, db)
	statusAfter, err := pub.Status(ctx, crashOutbox)
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range statusAfter {
		if st.Token <= statusBefore[i].Token {
			t.Errorf("partition %d: lease token %d, was %d: the second child never took it over", st.Partition, st.Token, statusBefore[i].Token)
		}
	}
}

// jobCounts returns how many River jobs each outbox ID has.
func jobCounts(t *testing.T, db *riverDB) map[int64]int {
	t.Helper()
	out := map[int64]int{}
	for _, id := range db.jobs(t) {
		out[id]++
	}
	return out
}

// checkGroupOrder fails t unless each group's jobs, in River job ID order, are in
// outbox ID order.
func checkGroupOrder(t *testing.T, db *riverDB) {
	t.Helper()
	rows, err := db.Query(`SELECT args->>'group_key', (args->>'id')::bigint FROM river_job ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	last := map[string]int64{}
	for rows.Next() {
		var g string
		var id int64
		if err := rows.Scan(&g, &id); err != nil {
			t.Fatal(err)
		}
		if prev := last[g]; id < prev {
			t.Errorf("group %s: job for message %d inserted after the one for %d", g, id, prev)
		}
		last[g] = id
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond every interval until it holds or ctx is done.
func waitFor(ctx context.Context, interval time.Duration, cond func() bool) bool {
	t := time.NewTicker(interval)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// parseInside reads the "block" child's report: its backend's pid and the batch's IDs.
func parseInside(t *testing.T, line string) (pid int, batch map[int64]bool) {
	t.Helper()
	fields := strings.Fields(line)
	if len(fields) != 3 || fields[0] != "inside" {
		t.Fatalf("first child said %q, want the batch it is inside", line)
	}
	pid, err := strconv.Atoi(fields[1])
	if err != nil {
		t.Fatalf("first child said %q: %v", line, err)
	}
	batch = map[int64]bool{}
	for _, f := range strings.Split(fields[2], ",") {
		id, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			t.Fatalf("first child said %q: %v", line, err)
		}
		batch[id] = true
	}
	if len(batch) == 0 || len(batch) > crashBatchSize {
		t.Fatalf("first child is inside a batch of %d, want 1 to %d", len(batch), crashBatchSize)
	}
	return pid, batch
}
