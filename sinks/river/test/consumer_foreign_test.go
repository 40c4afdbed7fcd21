package riversink_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
	riversink "github.com/outboxer-go/outboxer/sinks/river"
)

// foreignJobs is a PostgreSQL schema with River's tables holding the jobs of outbox
// messages 1, 2 and 3 (inserted by the sink) and, between them, a job of the same kind
// that the sink did not insert (no outboxer-key; args of message 7, metadata
// source: legacy, at most two attempts), with the consumer's inbox, logging to logs.
type foreignJobs struct {
	db      *riverDB
	in      *inbox.Inbox
	logs    *dbtest.Logs
	foreign int64 // the foreign job's ID

	mu    sync.Mutex
	calls map[int64]int
}

func newForeignJobs(t *testing.T) *foreignJobs {
	t.Helper()
	f := &foreignJobs{db: newRiverDB(t), calls: map[int64]int{}}
	var logger *slog.Logger
	f.logs, logger = dbtest.NewLogs()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	if f.in, err = inbox.New(inbox.Config{DB: f.db.DB.DB, Dialect: core.Postgres, Logger: logger}); err != nil {
		t.Fatal(err)
	}
	if err := f.in.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Exec(`CREATE TABLE effects (id BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	client := f.db.insertOnly(t)
	sink, err := riversink.NewTx(client, riversink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	inTx := func(do func(tx *sql.Tx) error) {
		tx, err := f.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if err := do(tx); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	deliver := func(ids ...int64) {
		var batch []core.Envelope
		for _, id := range ids {
			batch = append(batch, core.Envelope{ID: id, Outbox: "orders", Type: "order.placed", Payload: []byte(`{}`)})
		}
		inTx(func(tx *sql.Tx) error { return sink.DeliverTx(ctx, tx, batch) })
	}
	deliver(1)
	inTx(func(tx *sql.Tx) error {
		res, err := client.InsertTx(ctx, tx, riversink.Job{ID: 7, Outbox: "legacy", Type: "order.placed", Payload: json.RawMessage(`{}`)},
			&river.InsertOpts{Metadata: []byte(`{"source":"legacy"}`), MaxAttempts: 2})
		if err == nil {
			f.foreign = res.Job.ID
		}
		return err
	})
	deliver(2, 3)
	return f
}

func (f *foreignJobs) ran(id int64) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[id]
}

func (f *foreignJobs) skipped() int { return len(f.logs.Lines(slog.LevelWarn, "without a key")) }

// state returns the foreign job's state and the errors River recorded for it.
func (f *foreignJobs) state(t *testing.T) (state string, errs []string) {
	t.Helper()
	var raw []byte
	if err := f.db.QueryRow(`SELECT state, coalesce(to_jsonb(errors), '[]') FROM river_job WHERE id = $1`, f.foreign).Scan(&state, &raw); err != nil {
		t.Fatal(err)
	}
	var list []struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatal(err)
	}
	for _, e := range list {
		errs = append(errs, e.Error)
	}
	return state, errs
}

// work runs a River client with the inbox worker (and opts) until done holds, then
// stops it.
func (f *foreignJobs) work(t *testing.T, done func() bool, opts ...riversink.ConsumerOption) {
	t.Helper()
	worker, err := riversink.NewInboxWorker(f.in, "billing", func(ctx context.Context, tx *sql.Tx, job *river.Job[riversink.Job], _ inbox.Outcome) error {
		f.mu.Lock()
		f.calls[job.Args.ID]++
		f.mu.Unlock()
		_, err := tx.ExecContext(ctx, `INSERT INTO effects (id) VALUES ($1)`, job.Args.ID)
		return err
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := river.NewClient(riverpgxv5.New(f.db.pool), &river.Config{
		Schema: f.db.Schema, Workers: workers, RetryPolicy: retryAtOnce{},
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}},
		FetchPollInterval: 50 * time.Millisecond, FetchCooldown: 10 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for !done() && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer stopCancel()
	if err := client.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	if !done() {
		t.Fatalf("timed out: handler runs %v, foreign job %v\n%s", f.calls, f.foreignState(t), f.logs)
	}
}

func (f *foreignJobs) foreignState(t *testing.T) string {
	state, errs := f.state(t)
	return fmt.Sprintf("%s %q", state, errs)
}

// completed counts the jobs in state completed.
func (f *foreignJobs) completed(t *testing.T) (n int) {
	if err := f.db.QueryRow(`SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (f *foreignJobs) checkEffects(t *testing.T) {
	t.Helper()
	if e := dbtest.Effects(t, f.db.DB.DB); fmt.Sprint(e) != fmt.Sprint(map[int64]int{1: 1, 2: 1, 3: 1}) {
		t.Errorf("effects %v, want one each of 1, 2, 3", e)
	}
	if f.ran(7) != 0 {
		t.Errorf("the handler ran %d times for the foreign job", f.ran(7))
	}
}

// TestInboxWorkerSkipsForeignJobsByDefault: without OnForeign, a job the sink did not
// insert completes at its first attempt, with a warning to the inbox's logger and
// without running the handler (River does not run a completed job again); the
// outbox messages' jobs run once each.
func TestInboxWorkerSkipsForeignJobsByDefault(t *testing.T) {
	t.Parallel()
	f := newForeignJobs(t)
	f.work(t, func() bool { return f.completed(t) == 4 && f.skipped() == 1 })
	if state, errs := f.state(t); state != "completed" || len(errs) != 0 {
		t.Errorf("foreign job %s with errors %q, want completed without", state, errs)
	}
	if l := f.logs.Lines(slog.LevelWarn, "without a key"); len(l) != 1 || l[0].Attrs["consumer"] != "billing" || l[0].Attrs["message"] != fmt.Sprintf("job %d", f.foreign) {
		t.Errorf("warnings %v, want one naming consumer billing and job %d\n%s", l, f.foreign, f.logs)
	}
	f.checkEffects(t)
}

// TestInboxWorkerStopsAtForeignJob: with inbox.StopOnForeign, the foreign job fails
// with an error matching inbox.ErrNoKey at each attempt (River records it) and is
// discarded after its last; the outbox messages' jobs run once each.
func TestInboxWorkerStopsAtForeignJob(t *testing.T) {
	t.Parallel()
	f := newForeignJobs(t)
	discarded := func() bool { state, _ := f.state(t); return state == "discarded" }
	f.work(t, func() bool { return f.completed(t) == 3 && discarded() }, riversink.OnForeign(inbox.StopOnForeign))
	_, errs := f.state(t)
	if len(errs) != 2 {
		t.Errorf("River recorded %q for the foreign job, want the two attempts' errors", errs)
	}
	for _, e := range errs {
		if !strings.Contains(e, inbox.ErrNoKey.Error()) {
			t.Errorf("foreign job failed with %q, want inbox.ErrNoKey's error", e)
		}
	}
	if f.skipped() != 0 {
		t.Errorf("%d jobs skipped, want none", f.skipped())
	}
	f.checkEffects(t)
}

// TestInboxWorkerDeadLettersForeignJob: an OnForeign function receives the foreign
// job's contents (its encoded args, its metadata's strings, the job itself, the
// ErrNoKey error); when it fails the job fails with its error and River retries it;
// when it returns nil the job completes. A nil option is refused.
func TestInboxWorkerDeadLettersForeignJob(t *testing.T) {
	t.Parallel()
	if _, err := riversink.NewInboxWorker(inboxFor(t), "billing", func(context.Context, *sql.Tx, *river.Job[riversink.Job], inbox.Outcome) error { return nil }, nil); err == nil {
		t.Error("NewInboxWorker accepted a nil option")
	}
	f := newForeignJobs(t)
	var mu sync.Mutex
	var got []inbox.ForeignMessage
	down := errors.New("dead-letter store down")
	letters := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}
	f.work(t, func() bool { return f.completed(t) == 4 && letters() == 2 }, riversink.OnForeign(func(ctx context.Context, m inbox.ForeignMessage) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, m)
		if len(got) == 1 {
			return down
		}
		return nil
	}))
	for i, m := range got {
		job, _ := m.Raw.(*river.Job[riversink.Job])
		var args riversink.Job
		_ = json.Unmarshal(m.Payload, &args)
		if m.Consumer != "billing" || m.ID != fmt.Sprintf("job %d", f.foreign) || args.ID != 7 || args.Outbox != "legacy" ||
			m.Headers["source"] != "legacy" || !errors.Is(m.Err, inbox.ErrNoKey) || job == nil || job.Args.ID != 7 {
			t.Errorf("dead letter %d: %+v, want consumer billing, job %d, the args of 7, metadata source: legacy, ErrNoKey, the *river.Job", i, m, f.foreign)
		}
	}
	if state, errs := f.state(t); state != "completed" || len(errs) != 1 || !strings.Contains(errs[0], down.Error()) {
		t.Errorf("foreign job %s with errors %q, want completed after one failure with the dead-letter function's error", state, errs)
	}
	f.checkEffects(t)
}

// inboxFor is an inbox on a database of its own, for validation tests.
func inboxFor(t *testing.T) *inbox.Inbox {
	db := dbtest.SQLite(t)
	in, err := inbox.New(inbox.Config{DB: db.DB, Dialect: db.Dialect})
	if err != nil {
		t.Fatal(err)
	}
	return in
}
