package dbtest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// TestPostgresRestartUnderLoad restarts the PostgreSQL server while messages are published
// and relayed: delivery must resume by itself, with nothing lost and order kept. It stops
// the shared server for a few seconds, so it runs only with OUTBOXER_DISRUPTIVE set (make
// test runs it alone, after the other tests).
func TestPostgresRestartUnderLoad(t *testing.T) {
	if os.Getenv("OUTBOXER_DISRUPTIVE") == "" {
		t.Skip("restarts the PostgreSQL server: set OUTBOXER_DISRUPTIVE=1 (make disruptive)")
	}
	db := dbtest.Postgres(t)
	ctx := context.Background()
	rec := &recorder{}
	ob := setup(t, db, core.Config{LeaseDuration: 3 * time.Second, Outboxes: map[string]core.OutboxConfig{"orders": {
		Relay: rec, Partitions: 2, PollInterval: 20 * time.Millisecond, Backoff: fast,
	}}})
	run(t, ob)

	var (
		mu        sync.Mutex
		published []core.Envelope
		failed    int
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			env, err := ob.Publish(ctx, db.DB, event{Seq: i, Group: fmt.Sprint("order:", i%7)})
			mu.Lock()
			if err != nil {
				failed++ // the server is away: the publish did not happen, the caller would retry
			} else {
				published = append(published, env)
			}
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	})
	eventually(t, 20*time.Second, "traffic before the restart", func() bool { return len(rec.delivered()) > 200 })
	restart := exec.Command("bash", "-c", "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main restart")
	if out, err := restart.CombinedOutput(); err != nil {
		close(stop)
		wg.Wait()
		t.Fatalf("restart PostgreSQL: %v\n%s", err, out)
	}
	mu.Lock()
	atRestart := len(published)
	mu.Unlock()
	eventually(t, 60*time.Second, "publishing to resume", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(published) > atRestart+200
	})
	close(stop)
	wg.Wait()
	eventually(t, 120*time.Second, "every published message delivered", func() bool {
		return counts(t, ob, "orders").Pending == 0
	})
	t.Logf("published %d, %d publishes failed while the server was away", len(published), failed)
	// Delivered at least once each; within a group, first deliveries in ID order (a batch
	// whose confirmation the restart cut off is delivered again, which is allowed).
	got := rec.delivered()
	seen := map[int64]bool{}
	last := map[string]int64{}
	for _, e := range got {
		if seen[e.ID] {
			continue
		}
		seen[e.ID] = true
		if e.ID < last[e.GroupKey] {
			t.Fatalf("group %s: %d delivered first after %d", e.GroupKey, e.ID, last[e.GroupKey])
		}
		last[e.GroupKey] = e.ID
	}
	for _, e := range published {
		if !seen[e.ID] {
			t.Errorf("message %d lost", e.ID)
		}
	}
}
