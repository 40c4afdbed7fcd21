package riversink_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"go.uber.org/goleak"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	riversink "github.com/outboxer-go/outboxer/sinks/river"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(crashChildEnv); role != "" {
		os.Exit(crashChild(role))
	}
	goleak.VerifyTestMain(m,
		// database/sql's connection opener lives as long as a *sql.DB that dbtest closes
		// in the test's cleanup; pgx pools' health checks likewise.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
	)
}

// riverDB is a test schema with River's tables (migrated by rivermigrate) and a pgx pool
// on it for River's workers.
type riverDB struct {
	*dbtest.DB
	pool *pgxpool.Pool
}

func newRiverDB(t testing.TB) *riverDB {
	t.Helper()
	db := dbtest.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, db.DSN)
	if err != nil {
		t.Fatalf("pgx pool: %v", err)
	}
	t.Cleanup(pool.Close)
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: db.Schema})
	if err != nil {
		t.Fatalf("rivermigrate: %v", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		t.Fatalf("rivermigrate up: %v", err)
	}
	return &riverDB{DB: db, pool: pool}
}

// insertOnly is a River client on database/sql without a pool of its own: it inserts in
// the transactions it is given.
func (db *riverDB) insertOnly(t testing.TB) *river.Client[*sql.Tx] {
	t.Helper()
	c, err := river.NewClient(riverdatabasesql.New(nil), &river.Config{Schema: db.Schema})
	if err != nil {
		t.Fatalf("river client: %v", err)
	}
	return c
}

// jobs returns the outbox ID of every River job, in job ID order.
func (db *riverDB) jobs(t testing.TB) []int64 {
	t.Helper()
	rows, err := db.Query(`SELECT (metadata->>'outboxer_id')::bigint FROM river_job ORDER BY id`)
	if err != nil {
		t.Fatalf("list jobs: %v", err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

func envelopes(first int64, n, groups int) []core.Envelope {
	out := make([]core.Envelope, n)
	for i := range out {
		id := first + int64(i)
		out[i] = core.Envelope{
			ID: id, Outbox: "orders", Type: "order.placed", GroupKey: fmt.Sprintf("g%d", int(id)%groups),
			Payload: fmt.Appendf(nil, `{"n":%d}`, id), Headers: map[string]string{"trace": fmt.Sprint(id)},
		}
	}
	return out
}

func ids(envs []core.Envelope) []int64 {
	out := make([]int64, len(envs))
	for i, e := range envs {
		out[i] = e.ID
	}
	return out
}

func TestNewValidatesOptions(t *testing.T) {
	client, err := river.NewClient(riverdatabasesql.New(nil), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opts riversink.Options
		want string
	}{
		{riversink.Options{InsertOpts: river.InsertOpts{Priority: 5}}, "Options.InsertOpts.Priority"},
		{riversink.Options{InsertOpts: river.InsertOpts{MaxAttempts: -1}}, "Options.InsertOpts.MaxAttempts"},
		{riversink.Options{InsertOpts: river.InsertOpts{Metadata: []byte(`[1]`)}}, "Options.InsertOpts.Metadata"},
		{riversink.Options{Ordering: core.Ordering(9)}, "Options.Ordering"},
	} {
		if _, err := riversink.NewTx(client, tc.opts); err == nil || !containsStr(err.Error(), tc.want) {
			t.Errorf("NewTx(%+v) = %v, want an error naming %s", tc.opts, err, tc.want)
		}
	}
	if _, err := riversink.NewTx(nil, riversink.Options{}); err == nil {
		t.Error("NewTx(nil) succeeded")
	}
}

// compact is JSON without spaces (River stores args as jsonb, which adds them).
func compact(b []byte) string {
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return string(b)
	}
	return out.String()
}

func containsStr(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestDeliverTxCommitsAndRollsBackWithTheTransaction: jobs inserted by DeliverTx exist
// if and only if the transaction commits.
func TestDeliverTxCommitsAndRollsBackWithTheTransaction(t *testing.T) {
	db := newRiverDB(t)
	sink, err := riversink.NewTx(db.insertOnly(t), riversink.Options{InsertOpts: river.InsertOpts{Queue: "orders", Priority: 2}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	batch := envelopes(1, 100, 7)
	for _, commit := range []bool{false, true} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := sink.DeliverTx(ctx, tx, batch); err != nil {
			t.Fatalf("DeliverTx: %v", err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
		got := db.jobs(t)
		if want := map[bool][]int64{false: nil, true: ids(batch)}[commit]; !slices.Equal(got, want) {
			t.Fatalf("commit=%v: jobs for outbox ids %v, want %v", commit, got, want)
		}
	}
	var kind, queue string
	var priority int
	var args []byte
	if err := db.QueryRow(`SELECT kind, queue, priority, args FROM river_job ORDER BY id LIMIT 1`).Scan(&kind, &queue, &priority, &args); err != nil {
		t.Fatal(err)
	}
	var job riversink.Job
	if err := json.Unmarshal(args, &job); err != nil {
		t.Fatal(err)
	}
	if kind != riversink.DefaultKind || queue != "orders" || priority != 2 || job.ID != 1 || job.GroupKey != "g1" ||
		compact(job.Payload) != `{"n":1}` || job.Headers["trace"] != "1" || job.Type != "order.placed" || job.Outbox != "orders" {
		t.Fatalf("job: kind %q queue %q priority %d args %s", kind, queue, priority, args)
	}
}

// TestDeliverTxFailureLeavesTheTransactionUsable: a message whose job cannot be built
// fails alone (with what it holds back), and an insert River refuses is rolled back to a
// savepoint, so the engine can still record the failure in the same transaction.
func TestDeliverTxFailureLeavesTheTransactionUsable(t *testing.T) {
	db := newRiverDB(t)
	ctx := context.Background()
	sink, err := riversink.NewTx(db.insertOnly(t), riversink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	batch := envelopes(1, 20, 4)
	batch[5].Payload = []byte("not json") // id 6, group g2: permanent, holds nothing back
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var pf *core.PartialFailure
	if err := sink.DeliverTx(ctx, tx, batch); !errors.As(err, &pf) || len(pf.Failed) != 1 ||
		!errors.Is(pf.Failed[6], riversink.ErrPayloadNotJSON) || !errors.Is(pf.Failed[6], core.ErrPermanent) {
		t.Fatalf("DeliverTx = %v, want a partial failure of message 6 only, permanent", err)
	}
	// River refuses the whole insert: the job table is gone in this transaction.
	if _, err := tx.ExecContext(ctx, `ALTER TABLE river_job RENAME TO river_job_away`); err != nil {
		t.Fatal(err)
	}
	if err := sink.DeliverTx(ctx, tx, envelopes(100, 3, 1)); err == nil || errors.As(err, &pf) {
		t.Fatalf("DeliverTx without a job table = %v, want a plain error (nothing delivered)", err)
	}
	if _, err := tx.ExecContext(ctx, `ALTER TABLE river_job_away RENAME TO river_job`); err != nil {
		t.Fatalf("the transaction is unusable after a failed insert: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	want := slices.DeleteFunc(ids(batch), func(id int64) bool { return id == 6 })
	if got := db.jobs(t); !slices.Equal(got, want) {
		t.Fatalf("jobs for outbox ids %v, want %v", got, want)
	}
}

// TestDeliverDropsRepeatsWithUniqueJobs: outside the outbox's transaction, a batch
// delivered again (after a crash before the outbox rows were removed) adds no job.
func TestDeliverDropsRepeatsWithUniqueJobs(t *testing.T) {
	db := newRiverDB(t)
	client, err := river.NewClient(riverpgxv5.New(db.pool), &river.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := riversink.New(client, riversink.Options{Table: "order_outbox"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first, second := envelopes(1, 100, 5), envelopes(51, 100, 5) // 51..100 twice
	for _, b := range [][]core.Envelope{first, second, first} {
		if err := sink.Deliver(ctx, b); err != nil {
			t.Fatalf("Deliver: %v", err)
		}
	}
	got := db.jobs(t)
	if want := ids(envelopes(1, 150, 5)); !slices.Equal(got, want) {
		t.Fatalf("jobs for outbox ids %v (%d), want 1..150 once each", got, len(got))
	}
}

// TestEngineHandsOffInItsTransaction: through the engine (manual mode), the jobs are
// inserted and the outbox rows removed together; a drain leaves no pending message and
// one job per message.
func TestEngineHandsOffInItsTransaction(t *testing.T) {
	db := newRiverDB(t)
	ctx := context.Background()
	sink, err := riversink.NewTx(db.insertOnly(t), riversink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ob, err := core.New(core.Config{DB: db.DB.DB, Manual: true, Outboxes: map[string]core.OutboxConfig{
		"orders": {Relay: sink, BatchSize: 100, Partitions: 2},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var want []int64
	for i := range 450 {
		env, err := ob.Publish(ctx, tx, core.Raw{To: "orders", Type: "order.placed", Key: fmt.Sprintf("order:%d", i%9), Data: fmt.Appendf(nil, `{"i":%d}`, i)})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, env.ID)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	res, err := ob.Drain(ctx, "orders")
	if err != nil || res.Delivered != len(want) || res.Failed+res.Dead != 0 {
		t.Fatalf("Drain = %+v, %v", res, err)
	}
	counts, err := ob.Counts(ctx, "orders")
	if err != nil || counts.Pending != 0 {
		t.Fatalf("Counts = %+v, %v", counts, err)
	}
	got := db.jobs(t)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("jobs for %d outbox ids, want one for each of %d", len(got), len(want))
	}
}

// orderedWorker records the outbox IDs of the jobs it runs.
type orderedWorker struct {
	river.WorkerDefaults[riversink.Job]
	mu   sync.Mutex
	ran  []int64
	want int
	done chan struct{}
}

func (w *orderedWorker) Work(ctx context.Context, job *river.Job[riversink.Job]) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ran = append(w.ran, job.Args.ID)
	if len(w.ran) == w.want {
		close(w.done)
	}
	return nil
}

// TestSingleWorkerQueueRunsJobsInOrder: River runs the jobs of a queue in insertion order
// only with one worker on the queue (MaxWorkers 1); with it, every group's jobs run in
// outbox order.
func TestSingleWorkerQueueRunsJobsInOrder(t *testing.T) {
	db := newRiverDB(t)
	const total = 600
	worker := &orderedWorker{want: total, done: make(chan struct{})}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := river.NewClient(riverpgxv5.New(db.pool), &river.Config{
		Schema:            db.Schema,
		Queues:            map[string]river.QueueConfig{"ordered": {MaxWorkers: 1}},
		Workers:           workers,
		FetchCooldown:     10 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := riversink.New(client, riversink.Options{InsertOpts: river.InsertOpts{Queue: "ordered"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stopCtx, stop := context.WithTimeout(context.Background(), 30*time.Second)
		defer stop()
		if err := client.Stop(stopCtx); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	all := envelopes(1, total, 13)
	for b := 0; b < total; b += 100 {
		if err := sink.Deliver(ctx, all[b:b+100]); err != nil {
			t.Fatalf("Deliver: %v", err)
		}
	}
	select {
	case <-worker.done:
	case <-ctx.Done():
		worker.mu.Lock()
		t.Fatalf("ran %d of %d jobs in time", len(worker.ran), total)
	}
	worker.mu.Lock()
	defer worker.mu.Unlock()
	if !slices.Equal(worker.ran, ids(all)) {
		t.Fatalf("jobs ran out of order: %v", firstDiff(worker.ran, ids(all)))
	}
}

func firstDiff(got, want []int64) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("at %d ran %d, want %d", i, got[i], want[i])
		}
	}
	return fmt.Sprintf("ran %d jobs, want %d", len(got), len(want))
}
