package dbtest_test

// Helpers of the reliability scenarios 1, 2, 5 and 6 (chaos_commits, chaos_longtx,
// chaos_rollback and chaos_stop): a relay that records every delivery in process, and
// the bookkeeping of what committed. Names start with "chaos" to keep them apart from
// the other chaos files of the package.

import (
	"context"
	"database/sql"
	"slices"
	"sync"
	"testing"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// chaosSink is a Relay that records every delivery in the order it is handed over (a
// redelivery is recorded again), and lets a test wait for one message.
type chaosSink struct {
	mu      sync.Mutex
	seen    []dbtest.Delivery
	bodies  []string      // the payload of each delivery in seen
	first   map[int64]int // ID → position of its first delivery in seen
	waiters map[int64][]chan struct{}
	// gate, when set, runs before a batch is recorded; it may block (it must honour ctx)
	// and its error fails the whole batch.
	gate func(ctx context.Context, batch []core.Envelope) error
}

func newChaosSink() *chaosSink {
	return &chaosSink{first: map[int64]int{}, waiters: map[int64][]chan struct{}{}}
}

func (s *chaosSink) Deliver(ctx context.Context, batch []core.Envelope) error {
	if s.gate != nil {
		if err := s.gate(ctx, batch); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range batch {
		if _, ok := s.first[e.ID]; !ok {
			s.first[e.ID] = len(s.seen)
		}
		s.seen = append(s.seen, dbtest.Delivery{ID: e.ID, GroupKey: e.GroupKey})
		s.bodies = append(s.bodies, string(e.Payload))
		for _, c := range s.waiters[e.ID] {
			close(c)
		}
		delete(s.waiters, e.ID)
	}
	return nil
}

// deliveries returns every delivery so far, in order.
func (s *chaosSink) deliveries() []dbtest.Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

// payloads returns the payload of every delivery so far, in order.
func (s *chaosSink) payloads() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.bodies)
}

// distinct is how many different messages were delivered.
func (s *chaosSink) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.first)
}

// delivered returns a channel closed once id was delivered.
func (s *chaosSink) delivered(id int64) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := make(chan struct{})
	if _, ok := s.first[id]; ok {
		close(c)
		return c
	}
	s.waiters[id] = append(s.waiters[id], c)
	return c
}

// position is the index of id's first delivery, or -1.
func (s *chaosSink) position(id int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.first[id]; ok {
		return p
	}
	return -1
}

// chaosLedger is what the publishers of a scenario wrote: the IDs that committed (with
// their group) and the IDs whose transaction rolled back.
type chaosLedger struct {
	mu         sync.Mutex
	committed  map[int64]string
	rolledBack map[int64]string
	// Payloads: an ID alone does not tell a rolled-back message from a committed one on
	// SQLite, which hands a rolled-back ID out again.
	committedBody  map[int64]string
	rolledBackBody map[string]bool
	txs            int // committed transactions
	aborted        int // rolled-back transactions
}

func newChaosLedger() *chaosLedger {
	return &chaosLedger{committed: map[int64]string{}, rolledBack: map[int64]string{},
		committedBody: map[int64]string{}, rolledBackBody: map[string]bool{}}
}

func (l *chaosLedger) commit(envs ...core.Envelope) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.txs++
	for _, e := range envs {
		l.committed[e.ID] = e.GroupKey
		l.committedBody[e.ID] = string(e.Payload)
	}
}

func (l *chaosLedger) rollback(envs ...core.Envelope) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.aborted++
	for _, e := range envs {
		l.rolledBack[e.ID] = e.GroupKey
		l.rolledBackBody[string(e.Payload)] = true
	}
}

func (l *chaosLedger) committedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.committed)
}

// chaosForDialects runs f as a subtest per dialect, each with its own database.
func chaosForDialects(t *testing.T, dialects []core.Dialect, f func(t *testing.T, db *dbtest.DB)) {
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) { f(t, dbtest.Open(t, d)) })
	}
}

// chaosScore names the database of a score row as the scoreboard does.
func chaosScore(db *dbtest.DB) string {
	if db.Dialect == core.MySQL {
		return "mysql"
	}
	return string(db.Dialect)
}

// chaosQ rewrites ? placeholders for PostgreSQL.
func chaosQ(db *dbtest.DB, q string) string { return placeholders(db.Dialect, q) }

// chaosStored is a message row as the table holds it.
type chaosStored struct {
	group    string
	state    int
	attempts int
	lastErr  bool
	errText  string // the recorded failure, if any
	payload  string
}

// chaosStoredRows reads every row of the default message table, by ID.
func chaosStoredRows(t *testing.T, db *dbtest.DB) map[int64]chaosStored {
	t.Helper()
	rows, err := db.QueryContext(context.Background(),
		`SELECT id, group_key, state, attempts, last_error, payload FROM `+core.DefaultTable)
	if err != nil {
		t.Fatalf("read the message table: %v", err)
	}
	defer rows.Close()
	out := map[int64]chaosStored{}
	for rows.Next() {
		var id int64
		var s chaosStored
		var payload []byte
		var lastErr sql.NullString
		if err := rows.Scan(&id, &s.group, &s.state, &s.attempts, &lastErr, &payload); err != nil {
			t.Fatal(err)
		}
		s.payload = string(payload)
		s.lastErr, s.errText = lastErr.Valid, lastErr.String
		out[id] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// chaosCheckTally fails the test on what a tally must never show: a lost or phantom
// message; reordering and duplicates are the caller's to judge.
func chaosCheckTally(t *testing.T, s dbtest.Score) {
	t.Helper()
	if s.Lost != 0 {
		t.Errorf("%d committed messages were never delivered", s.Lost)
	}
	if s.Phantom != 0 {
		t.Errorf("%d delivered messages never committed", s.Phantom)
	}
	if s.Delivered != s.Committed {
		t.Errorf("delivered %d distinct messages of %d committed", s.Delivered, s.Committed)
	}
}
