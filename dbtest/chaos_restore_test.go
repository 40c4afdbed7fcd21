package dbtest_test

// Scenario 10 of the reliability suite: a PostgreSQL schema with a backlog is dumped with
// pg_dump while a relay is delivering from it, and restored with pg_restore into a new
// database. A relay started on the restore must go on from there: the restored lease
// rows still name the old relay and may not have run out; they hold the new relay back
// until they do, and no longer. It delivers the restored backlog in order, new messages
// get IDs after every restored one, and nothing committed before the dump is lost
// (what the old relay confirmed after the dump comes again: a restore rolls back
// confirmations, as it rolls back everything else).

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// restoreSink records deliveries in order, with when each partition first got one.
type restoreSink struct {
	mu    sync.Mutex
	delay time.Duration // per batch: a slow broker, so that a backlog builds up
	got   []dbtest.Delivery
	ids   map[int64]int
	first map[int]time.Time
	// hold, when set, stops deliveries once holdAfter messages went out, until it is
	// closed: the backlog is still there when the dump is taken, however slow pg_dump is.
	hold      chan struct{}
	holdAfter int
}

func newRestoreSink(delay time.Duration) *restoreSink {
	return &restoreSink{delay: delay, ids: map[int64]int{}, first: map[int]time.Time{}}
}

func (s *restoreSink) Deliver(ctx context.Context, batch []core.Envelope) error {
	now := time.Now()
	s.mu.Lock()
	if _, ok := s.first[batch[0].Partition]; !ok {
		s.first[batch[0].Partition] = now
	}
	for _, e := range batch {
		s.got = append(s.got, dbtest.Delivery{ID: e.ID, GroupKey: e.GroupKey})
		s.ids[e.ID]++
	}
	held := s.hold != nil && len(s.ids) >= s.holdAfter
	s.mu.Unlock()
	if held {
		select {
		case <-s.hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if s.delay > 0 && !restoreSleep(ctx, s.delay) {
		return ctx.Err()
	}
	return nil
}

func (s *restoreSink) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

func (s *restoreSink) hasAll(ids []int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if s.ids[id] == 0 {
			return false
		}
	}
	return true
}

func (s *restoreSink) snapshot() ([]dbtest.Delivery, map[int]time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	first := map[int]time.Time{}
	for p, at := range s.first {
		first[p] = at
	}
	return slices.Clone(s.got), first
}

// restoreSleep waits d or until ctx ends, and reports whether d passed.
func restoreSleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// restoreTools finds the PostgreSQL client programs (Debian's postgresql-client).
func restoreTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"pg_dump", "pg_restore", "createdb", "dropdb"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is missing (install postgresql-client): %v", tool, err)
			}
			t.Skipf("%s is missing (install postgresql-client): %v", tool, err)
		}
	}
}

func restoreRun(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// restoreLease is a lease row as the restore left it.
type restoreLease struct {
	owner   string
	token   int64
	expires time.Time
	live    bool // not run out when it was read
}

func restoreLeases(t *testing.T, db *sql.DB) map[int]restoreLease {
	t.Helper()
	rows, err := db.QueryContext(context.Background(),
		`SELECT part, owner, token, expires_at, expires_at > now() FROM `+core.DefaultTable+`_leases WHERE outbox = 'orders'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int]restoreLease{}
	for rows.Next() {
		var p int
		var l restoreLease
		if err := rows.Scan(&p, &l.owner, &l.token, &l.expires, &l.live); err != nil {
			t.Fatal(err)
		}
		out[p] = l
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestChaosRestore(t *testing.T) {
	restoreTools(t)
	db := dbtest.Postgres(t)
	ctx := context.Background()
	const parts = 2
	lease := 3 * time.Second
	total := dbtest.Pick(400, 20000*max(1, dbtest.ChaosScale()))

	pub := setup(t, db, core.Config{PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {Partitions: parts}}})
	committed := map[int64]string{}
	for i := 0; i < total; i += 200 {
		msgs := make([]core.Message, min(200, total-i))
		for j := range msgs {
			msgs[j] = event{Seq: i + j, Group: fmt.Sprintf("order:%d", (i+j)%12)}
		}
		for _, e := range publish(t, pub, db.DB, msgs...) {
			committed[e.ID] = e.GroupKey
		}
	}

	// The old relay delivers slowly, and holds both partitions when the dump is taken.
	oldSink := newRestoreSink(20 * time.Millisecond)
	oldSink.hold, oldSink.holdAfter = make(chan struct{}), 40
	old, err := core.New(core.Config{DB: db.DB, LeaseDuration: lease, Logger: quiet,
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: oldSink, Partitions: parts, BatchSize: 10, PollInterval: 20 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	stopOld := run(t, old)
	eventually(t, 60*time.Second, "the old relay to deliver", func() bool { return oldSink.distinct() >= 40 })
	dump := filepath.Join(t.TempDir(), "outbox.dump")
	dumpAt := time.Now()
	restoreRun(t, "pg_dump", "--format=custom", "--schema="+db.Schema, "--file="+dump, dbtest.PostgresURL())
	close(oldSink.hold)
	stopOld()

	// Restore into a new database, dropped after the test (after the handles on it close).
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	dbName := "restore_" + hex.EncodeToString(b)
	server, err := url.Parse(dbtest.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	admin := *server
	admin.RawQuery = ""
	restoreRun(t, "createdb", "--maintenance-db="+admin.String(), dbName)
	t.Cleanup(func() {
		if out, err := exec.Command("dropdb", "--force", "--maintenance-db="+admin.String(), dbName).CombinedOutput(); err != nil {
			t.Errorf("dropdb %s: %v\n%s", dbName, err, out)
		}
	})
	target := *server
	target.Path = "/" + dbName
	restoreRun(t, "pg_restore", "--no-owner", "--exit-on-error", "--dbname="+target.String(), dump)
	restoredAt := time.Now()
	q := target.Query()
	q.Set("search_path", db.Schema)
	target.RawQuery = q.Encode()
	rdb, err := sql.Open("pgx", target.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })

	// What the restore holds: a backlog, and the old relay's leases.
	var backlog []int64
	if err := restoreIDs(ctx, rdb, `SELECT id FROM `+core.DefaultTable+` WHERE state = 0 ORDER BY id`, &backlog); err != nil {
		t.Fatal(err)
	}
	if len(backlog) == 0 || len(backlog) == total {
		t.Fatalf("the dump holds %d of %d messages pending: want a backlog the old relay had started on", len(backlog), total)
	}
	inBacklog := map[int64]bool{}
	for _, id := range backlog {
		inBacklog[id] = true
	}
	oldDs, _ := oldSink.snapshot()
	oldGot := map[int64]bool{}
	for _, d := range oldDs {
		oldGot[d.ID] = true
	}
	for id := range committed {
		if !inBacklog[id] && !oldGot[id] {
			t.Errorf("message %d is neither in the restored backlog nor was it delivered before the dump", id)
		}
	}
	stale := restoreLeases(t, rdb)
	live := 0
	for p := range parts {
		l, ok := stale[p]
		if !ok || l.owner == "" {
			t.Fatalf("partition %d: the restore holds no lease of the old relay (%+v)", p, l)
		}
		if l.live {
			live++
		}
	}
	t.Logf("restored %d pending of %d, %v after the dump began; %d of %d restored leases had not run out", len(backlog), total, restoredAt.Sub(dumpAt), live, parts)

	// The new relay on the restore.
	newSink := newRestoreSink(0)
	relay, err := core.New(core.Config{DB: rdb, LeaseDuration: lease, Logger: quiet,
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: newSink, Partitions: parts, BatchSize: 50, PollInterval: 20 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	stopNew := run(t, relay)
	eventually(t, 60*time.Second, "the restored backlog delivered", func() bool { return newSink.hasAll(backlog) })

	// It goes on: new messages published into the restore come after every restored one.
	more := dbtest.Pick(60, 1000)
	rpub, err := core.New(core.Config{DB: rdb, PublishOnly: true, Logger: quiet,
		Outboxes: map[string]core.OutboxConfig{"orders": {Partitions: parts}}})
	if err != nil {
		t.Fatal(err)
	}
	var maxOld int64
	for id := range committed {
		maxOld = max(maxOld, id)
	}
	var fresh []int64
	for i := 0; i < more; i += 20 {
		msgs := make([]core.Message, 20)
		for j := range msgs {
			msgs[j] = event{Seq: total + i + j, Group: fmt.Sprintf("order:%d", (i+j)%12)}
		}
		for _, e := range publish(t, rpub, rdb, msgs...) {
			if e.ID <= maxOld {
				t.Errorf("a message published into the restore got ID %d, not after the restored %d", e.ID, maxOld)
			}
			committed[e.ID] = e.GroupKey
			fresh = append(fresh, e.ID)
		}
	}
	eventually(t, 60*time.Second, "the new messages delivered", func() bool { return newSink.hasAll(fresh) })
	status, err := relay.Status(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	stopNew()

	newDs, first := newSink.snapshot()
	// The restored leases held the new relay back until they ran out, and no longer.
	for p := range parts {
		l := stale[p]
		at, ok := first[p]
		if !ok {
			t.Errorf("partition %d: the new relay delivered nothing", p)
			continue
		}
		if at.Before(l.expires) {
			t.Errorf("partition %d: the new relay delivered at %v, before the restored lease ran out at %v", p, at, l.expires)
		}
		free := l.expires // from when the new relay could take the partition
		if started.After(free) {
			free = started
		}
		if wait := at.Sub(free); wait > lease/4+5*time.Second {
			t.Errorf("partition %d: the new relay first delivered %v after it could take the partition, more than a lease check's period", p, wait)
		}
	}
	for _, st := range status {
		if l := stale[st.Partition]; st.Token <= l.token || st.Owner == l.owner {
			t.Errorf("partition %d: owner %q token %d after the takeover, restored owner %q token %d: want a new owner with a higher token", st.Partition, st.Owner, st.Token, l.owner, l.token)
		}
	}
	// Exactly the restored backlog and the new messages, each once, in order per group.
	want := append(slices.Clone(backlog), fresh...)
	slices.Sort(want)
	var got []int64
	last := map[string]int64{}
	for _, d := range newDs {
		got = append(got, d.ID)
		if d.ID < last[d.GroupKey] {
			t.Errorf("group %s: %d delivered after %d", d.GroupKey, d.ID, last[d.GroupKey])
		}
		last[d.GroupKey] = d.ID
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("the new relay delivered %d messages, want the %d restored and the %d new ones, each once", len(got), len(backlog), len(fresh))
	}
	if c := counts(t, relay, "orders"); c.Pending != 0 || c.Dead != 0 {
		t.Errorf("counts on the restore after every delivery: %+v", c)
	}

	firstAny := time.Time{}
	for _, at := range first {
		if firstAny.IsZero() || at.Before(firstAny) {
			firstAny = at
		}
	}
	score := dbtest.Tally(dbtest.Score{
		Scenario: "10 restore", Variant: "pg_dump/pg_restore of a schema with a backlog, relay on the restore",
		Database: "postgres", Published: total + more, Recover: firstAny.Sub(started),
		Notes: fmt.Sprintf("%d pending in the dump; %d of %d restored leases still live at the start (lease %v); recover: from the new relay's start to its first delivery; duplicates: confirmed after the dump",
			len(backlog), live, parts, lease),
	}, committed, append(oldDs, newDs...))
	if score.Lost != 0 || score.Phantom != 0 || score.Reordered != 0 {
		t.Errorf("lost %d, phantom %d, reordered %d: want none", score.Lost, score.Phantom, score.Reordered)
	}
	dbtest.Record(t, score)
}

func restoreIDs(ctx context.Context, db *sql.DB, q string, out *[]int64) error {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return err
		}
		*out = append(*out, id)
	}
	return rows.Err()
}
