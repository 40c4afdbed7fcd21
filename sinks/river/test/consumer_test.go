package riversink_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/inbox"
	riversink "github.com/outboxer-go/outboxer/sinks/river"
)

type retryAtOnce struct{}

func (retryAtOnce) NextRetry(*rivertype.JobRow) time.Time { return time.Now() }

// TestInboxWorkerRunsEachJobOnce: every job carries its row's key (for Options.Source)
// in its metadata; a message inserted twice (two jobs, one key) runs the handler once;
// a handler error rolls back its write and River retries the job, which then runs.
func TestInboxWorkerRunsEachJobOnce(t *testing.T) {
	db := newRiverDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	in, err := inbox.New(inbox.Config{DB: db.DB.DB, Dialect: core.Postgres})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE effects (id BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}

	sink, err := riversink.NewTx(db.insertOnly(t), riversink.Options{Source: "orders-db"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ids := range [][]int64{{1, 2}, {1}} { // the second insert of 1 is a duplicate
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var batch []core.Envelope
		for _, id := range ids {
			batch = append(batch, core.Envelope{ID: id, Outbox: "orders", Type: "order.placed", GroupKey: "customer-1", Payload: []byte(`{}`)})
		}
		if err := sink.DeliverTx(ctx, tx, batch); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := db.Query(`SELECT (metadata->>'outboxer_id')::bigint, metadata FROM river_job`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var meta []byte
		if err := rows.Scan(&id, &meta); err != nil {
			t.Fatal(err)
		}
		m, err := riversink.MessageOf(meta)
		if err != nil || m.Key != core.MessageKey("orders-db", core.DefaultTable, id) {
			t.Errorf("job of message %d: key %q, %v; want core.MessageKey(Source, table, id)", id, m.Key, err)
		}
		if m.Seq != id || m.Group != inbox.GroupOf("orders", "customer-1") {
			t.Errorf("job of message %d: group %q seq %d, want the outbox's group and the ID", id, m.Group, m.Seq)
		}
	}
	rows.Close()

	var mu sync.Mutex
	calls := map[int64]int{}
	boom := errors.New("boom")
	worker, err := riversink.NewInboxWorker(in, "billing", func(ctx context.Context, tx *sql.Tx, job *river.Job[riversink.Job], o inbox.Outcome) error {
		mu.Lock()
		calls[job.Args.ID]++
		fail := job.Args.ID == 2 && calls[2] == 1
		mu.Unlock()
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`INSERT INTO effects (id) VALUES (%d)`, job.Args.ID)); err != nil {
			return err
		}
		if fail {
			return boom
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := river.NewClient(riverpgxv5.New(db.pool), &river.Config{
		Schema: db.Schema, Workers: workers, RetryPolicy: retryAtOnce{},
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}},
		FetchPollInterval: 50 * time.Millisecond, FetchCooldown: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	completed := func() (n int) {
		if err := db.QueryRow(`SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for completed() < 3 && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer stopCancel()
	if err := client.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	if n := completed(); n != 3 {
		t.Fatalf("%d of 3 jobs completed", n)
	}
	effects := map[int64]int{}
	rows, err = db.Query(`SELECT id FROM effects`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		effects[id]++
	}
	rows.Close()
	if effects[1] != 1 || effects[2] != 1 || len(effects) != 2 {
		t.Errorf("effects %v, want 1 and 2 once each", effects)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls[1] != 1 || calls[2] != 2 {
		t.Errorf("handler calls %v, want 1:1 2:2 (2 failed once and was retried)", calls)
	}
	var errs int
	if err := db.QueryRow(`SELECT coalesce(sum(cardinality(errors)), 0) FROM river_job`).Scan(&errs); err != nil || errs != 1 {
		t.Errorf("River recorded %d job errors (%v), want 1: the failed attempt of 2", errs, err)
	}
}

func TestInboxWorkerRefusesJobsWithoutKey(t *testing.T) {
	if _, err := riversink.MessageOf([]byte(`{"outboxer_id":1}`)); !errors.Is(err, inbox.ErrNoKey) {
		t.Errorf("MessageOf(metadata without a key) = %v, want inbox.ErrNoKey", err)
	}
	if m, err := riversink.MessageOf([]byte(`{"` + riversink.MetadataKey + `":"k"}`)); err != nil || m.Key != "k" || m.Group != "" {
		t.Errorf("MessageOf = %+v, %v", m, err)
	}
	if _, err := riversink.NewInboxWorker[riversink.Job](nil, "billing", nil); err == nil {
		t.Error("NewInboxWorker without an inbox accepted it")
	}
}
