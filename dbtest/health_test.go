package dbtest_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// health reads the health of the orders outbox.
func health(t *testing.T, ob *core.Outboxer) core.OutboxHealth {
	t.Helper()
	h, err := ob.Health(context.Background(), "orders")
	if err != nil {
		t.Fatalf("Health: %v", err)
	}
	if len(h.Outboxes) != 1 || h.Outboxes[0].Outbox != "orders" || h.At.IsZero() {
		t.Fatalf("Health: %+v", h)
	}
	return h.Outboxes[0]
}

// ageRows moves the creation and due time of messages an hour into the past, as if they
// had waited that long.
func ageRows(t *testing.T, db *dbtest.DB, ids ...int64) {
	t.Helper()
	back := map[core.Dialect]string{
		core.Postgres: "%s - interval '1 hour'",
		core.MySQL:    "%s - INTERVAL 1 HOUR",
		core.SQLite:   "%s - 3600000000",
	}[db.Dialect]
	list := make([]string, len(ids))
	for i, id := range ids {
		list[i] = strconv.FormatInt(id, 10)
	}
	q := fmt.Sprintf(`UPDATE outboxer_messages SET created_at = %s, available_at = %s WHERE id IN (%s)`,
		fmt.Sprintf(back, "created_at"), fmt.Sprintf(back, "available_at"), strings.Join(list, ", "))
	if _, err := db.ExecContext(context.Background(), q); err != nil {
		t.Fatalf("age rows: %v", err)
	}
}

// wantProblems checks that err reports exactly the given problems, each as a *HealthError
// of the orders outbox that matches ErrUnhealthy.
func wantProblems(t *testing.T, what string, err error, problems ...error) {
	t.Helper()
	if len(problems) == 0 {
		if err != nil {
			t.Fatalf("%s: Check = %v, want nil", what, err)
		}
		return
	}
	if !errors.Is(err, core.ErrUnhealthy) {
		t.Fatalf("%s: Check = %v, want ErrUnhealthy", what, err)
	}
	all := []error{core.ErrLagging, core.ErrBacklog, core.ErrDeadMessages, core.ErrUnownedPartitions, core.ErrPaused}
	for _, p := range all {
		if got, want := errors.Is(err, p), slices.Contains(problems, p); got != want {
			t.Fatalf("%s: errors.Is(%v, %v) = %v, want %v", what, err, p, got, want)
		}
	}
	var he *core.HealthError
	if !errors.As(err, &he) || he.Outbox != "orders" {
		t.Fatalf("%s: Check = %v, want a *HealthError of orders", what, err)
	}
}

// TestHealth follows known traffic through the health of an outbox: the backlog and its
// age, scheduled messages, a failing relay, a dead message, a pause, a running node that
// owns the partitions and its graceful stop.
func TestHealth(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		relay := &recorder{}
		cfg := core.OutboxConfig{
			Relay: relay, Partitions: 2, MaxAttempts: 3,
			Backoff: core.Backoff{Func: func(int) time.Duration { return time.Hour }},
		}
		ob := setup(t, db, core.Config{Manual: true, Outboxes: map[string]core.OutboxConfig{"orders": cfg}})
		noOwners := core.HealthLimits{AllowUnowned: true}

		if _, err := ob.Health(ctx, "orders", "nope"); !errors.Is(err, core.ErrUnknownOutbox) {
			t.Fatalf("Health of an unknown outbox: %v", err)
		}

		// Nothing published, nothing ever ran: empty, and nobody owns the partitions.
		h := health(t, ob)
		if h.Pending != 0 || h.Dead != 0 || h.OldestAge != 0 || h.Paused || len(h.Owners) != 0 ||
			!slices.Equal(h.Unowned, []int{0, 1}) || len(h.Partitions) != 2 {
			t.Fatalf("empty outbox: %+v", h)
		}
		wantProblems(t, "empty", h.Check(core.HealthLimits{}), core.ErrUnownedPartitions)
		wantProblems(t, "empty, unowned allowed", h.Check(noOwners))

		// Six messages in six groups over two partitions, an hour old; one more scheduled
		// an hour ahead.
		var msgs []core.Message
		for i := range 6 {
			msgs = append(msgs, event{Group: fmt.Sprintf("g%d", i), Seq: i})
		}
		envs := publish(t, ob, db, msgs...)
		ids := make([]int64, len(envs))
		perPart := map[int]int64{}
		for i, e := range envs {
			ids[i] = e.ID
			perPart[e.Partition]++
		}
		if len(perPart) != 2 {
			t.Fatalf("the six groups landed in partitions %v; the test wants both", perPart)
		}
		ageRows(t, db, ids...)
		later, err := ob.Publish(ctx, db, event{Group: "later", Seq: 99}, core.WithDelay(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		h = health(t, ob)
		if h.Pending != 7 || h.Scheduled != 1 || h.Retrying != 0 || h.Dead != 0 {
			t.Fatalf("after publishing: %+v", h)
		}
		if h.OldestAge < time.Hour || h.OldestAge > time.Hour+10*time.Minute {
			t.Fatalf("oldest age %v, want an hour and a little", h.OldestAge)
		}
		for _, p := range h.Partitions {
			want := perPart[p.Partition]
			if p.Partition == later.Partition {
				want++
			}
			if p.Pending != want || p.Dead != 0 || p.LeaseHeld || p.Owner != "" {
				t.Fatalf("partition %d: %+v, want %d pending", p.Partition, p, want)
			}
		}
		wantProblems(t, "lagging", h.Check(core.HealthLimits{MaxAge: 30 * time.Minute, AllowUnowned: true}), core.ErrLagging)
		wantProblems(t, "within the age", h.Check(core.HealthLimits{MaxAge: 2 * time.Hour, AllowUnowned: true}))
		wantProblems(t, "backlog", h.Check(core.HealthLimits{MaxPending: 6, AllowUnowned: true}), core.ErrBacklog)
		wantProblems(t, "backlog within", h.Check(core.HealthLimits{MaxPending: 7, AllowUnowned: true}))
		wantProblems(t, "everything", h.Check(core.HealthLimits{MaxAge: time.Minute, MaxPending: 1}),
			core.ErrLagging, core.ErrBacklog, core.ErrUnownedPartitions)

		// The relay fails the first message (it will be retried in an hour) and rejects
		// the second for good: it is dead.
		retried, dead := envs[0], envs[1]
		relay.Fail = func(batch []core.Envelope) error {
			failed := map[int64]error{}
			for _, e := range batch {
				switch e.ID {
				case retried.ID:
					failed[e.ID] = errors.New("broker unavailable")
				case dead.ID:
					failed[e.ID] = core.Permanent(errors.New("message too large"))
				}
			}
			if len(failed) == 0 {
				return nil
			}
			return &core.PartialFailure{Failed: failed}
		}
		res, err := ob.Drain(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		if res != (core.DrainResult{Delivered: 4, Failed: 1, Dead: 1}) {
			t.Fatalf("Drain: %+v", res)
		}
		h = health(t, ob)
		if h.Pending != 2 || h.Retrying != 1 || h.Scheduled != 1 || h.Dead != 1 {
			t.Fatalf("after the failures: %+v", h)
		}
		// The retried message is still the oldest due one, although its retry is an hour
		// away: it holds its group back.
		if h.OldestAge < time.Hour || h.OldestAge > time.Hour+10*time.Minute {
			t.Fatalf("oldest age after a failure %v, want an hour and a little", h.OldestAge)
		}
		for _, p := range h.Partitions {
			var pending, retrying, dead1 int64
			if p.Partition == retried.Partition {
				pending, retrying = pending+1, 1
			}
			if p.Partition == later.Partition {
				pending++
			}
			if p.Partition == dead.Partition {
				dead1 = 1
			}
			if p.Pending != pending || p.Retrying != retrying || p.Dead != dead1 {
				t.Fatalf("partition %d after the failures: %+v", p.Partition, p)
			}
			// Drain held the leases while it ran and gave them back.
			if p.LeaseHeld {
				t.Fatalf("partition %d still held after Drain: %+v", p.Partition, p)
			}
		}
		wantProblems(t, "dead", h.Check(noOwners), core.ErrDeadMessages)
		wantProblems(t, "one dead allowed", h.Check(core.HealthLimits{MaxDead: 1, AllowUnowned: true}))
		wantProblems(t, "dead not checked", h.Check(core.HealthLimits{MaxDead: -1, AllowUnowned: true}))

		// Discard the retried message and revive nothing: only the dead one and the
		// scheduled one are left, and nothing due is waiting.
		if _, err := ob.Discard(ctx, "orders", retried.ID); err != nil {
			t.Fatal(err)
		}
		h = health(t, ob)
		if h.Pending != 1 || h.Scheduled != 1 || h.Retrying != 0 || h.OldestAge != 0 || h.Dead != 1 {
			t.Fatalf("after the discard: %+v", h)
		}

		// Paused on every node.
		if err := ob.Pause(ctx, "orders"); err != nil {
			t.Fatal(err)
		}
		h = health(t, ob)
		if !h.Paused {
			t.Fatalf("after Pause: %+v", h)
		}
		for _, p := range h.Partitions {
			if !p.Paused {
				t.Fatalf("partition %d not paused", p.Partition)
			}
		}
		wantProblems(t, "paused, by default", h.Check(core.HealthLimits{MaxDead: -1, AllowUnowned: true}))
		wantProblems(t, "paused, refused", h.Check(core.HealthLimits{MaxDead: -1, AllowUnowned: true, FailPaused: true}), core.ErrPaused)
		if err := ob.Resume(ctx, "orders"); err != nil {
			t.Fatal(err)
		}
		if h = health(t, ob); h.Paused {
			t.Fatalf("after Resume: %+v", h)
		}

		// A node runs: it owns both partitions.
		node, err := core.New(core.Config{DB: db.DB, Logger: quiet, LeaseDuration: 2 * time.Second,
			Outboxes: map[string]core.OutboxConfig{"orders": {Relay: &recorder{}, Partitions: 2}}})
		if err != nil {
			t.Fatal(err)
		}
		stop := run(t, node)
		eventually(t, 20*time.Second, "the node to own both partitions", func() bool {
			h = health(t, ob)
			return len(h.Unowned) == 0
		})
		if len(h.Owners) != 1 {
			t.Fatalf("owners: %v", h.Owners)
		}
		owner := slices.Collect(maps.Keys(h.Owners))[0]
		if h.Owners[owner] != 2 {
			t.Fatalf("owners: %v", h.Owners)
		}
		for _, p := range h.Partitions {
			if !p.LeaseHeld || p.Owner != owner || p.LeaseExpires.Before(time.Now().Add(-time.Minute)) {
				t.Fatalf("partition %d while the node runs: %+v", p.Partition, p)
			}
		}
		wantProblems(t, "running", h.Check(core.HealthLimits{MaxDead: -1}))
		if err := ob.CheckHealth(ctx, core.HealthLimits{MaxAge: time.Minute}, "orders"); !errors.Is(err, core.ErrDeadMessages) || errors.Is(err, core.ErrUnownedPartitions) {
			t.Fatalf("CheckHealth while running: %v", err)
		}

		// It stops gracefully and hands its partitions back at once.
		stop()
		h = health(t, ob)
		if len(h.Owners) != 0 || !slices.Equal(h.Unowned, []int{0, 1}) {
			t.Fatalf("after the node stopped: %+v", h)
		}
		wantProblems(t, "stopped", h.Check(core.HealthLimits{MaxDead: -1}), core.ErrUnownedPartitions)
	})
}

// TestHealthKilledNode: a relay process killed with SIGKILL keeps owning its partitions
// until its leases run out; then the health reports them unowned.
func TestHealthKilledNode(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		relayTables(t, db)
		ob := setup(t, db, core.Config{PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {Partitions: 2}}})
		node := startRelay(t, helperConfig{
			Driver: db.Driver, DSN: db.DSN, Dialect: db.Dialect, Partitions: 2, BatchSize: 10,
			Poll: 20 * time.Millisecond, Lease: time.Second,
		})
		node.waitLine(t, "READY", 30*time.Second)
		pid := "/" + strconv.Itoa(node.cmd.Process.Pid) + "/"
		var h core.OutboxHealth
		eventually(t, 20*time.Second, "the relay process to own both partitions", func() bool {
			h = health(t, ob)
			return len(h.Unowned) == 0
		})
		for owner, n := range h.Owners {
			if !strings.Contains(owner, pid) || n != 2 {
				t.Fatalf("owners while the relay runs: %v (pid %s)", h.Owners, pid)
			}
		}

		node.kill()
		eventually(t, 20*time.Second, "the killed relay's leases to run out", func() bool {
			h = health(t, ob)
			return len(h.Unowned) == 2
		})
		if len(h.Owners) != 0 || !slices.Equal(h.Unowned, []int{0, 1}) {
			t.Fatalf("after the kill: %+v", h)
		}
		for _, p := range h.Partitions {
			// The dead owner is still named, its lease no longer live.
			if p.LeaseHeld || !strings.Contains(p.Owner, pid) {
				t.Fatalf("partition %d after the kill: %+v", p.Partition, p)
			}
		}
		wantProblems(t, "killed", h.Check(core.HealthLimits{}), core.ErrUnownedPartitions)
	})
}
