package sinktest

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
)

// Poison is a message the destination refuses for good: too large for the broker, bound
// for a destination that does not exist, a payload the job queue cannot store. The
// "Poison" case publishes it among ordinary messages and runs the real engine
// (core.New, Run) on Harness.DB with the sink as the relay.
type Poison struct {
	// Name of the poison, for the subtest and the score: "oversize", "missing-topic".
	Name string
	// Payload of the poison message. The harness's relay must refuse a message with
	// this payload every time it is handed one, and deliver the others.
	Payload []byte
	// Permanent says the sink reports the refusal with core.Permanent: the engine makes
	// the message dead at its first attempt, whatever MaxAttempts says, and its group
	// moves on. Otherwise the refusal is an ordinary error: retried up to MaxAttempts,
	// and forever (holding its group back) when MaxAttempts is 0.
	Permanent bool
	// Reason is text the dead message's LastError must contain: what the refusal says.
	Reason string
	// By says who refuses it, for the score: "broker: …" when the broker or database
	// answers with an error, "sink: …" when the sink's own check refuses it first.
	By string
}

// PoisonResult is what one run of the "Poison" case saw, for a reliability scoreboard.
type PoisonResult struct {
	Poison  Poison
	Variant string // "max-attempts=3" or "max-attempts=0"
	// Published and Committed count every message, the poison included.
	Published, Committed int
	// Delivered counts distinct messages that arrived, Duplicated the extra arrivals,
	// Reordered the first arrivals that came after a later message of their group,
	// and Lost the messages other than the poison that never arrived.
	Delivered, Duplicated, Reordered, Lost int
	// Attempts is how many times the engine handed the poison to the relay.
	Attempts int
	// Outcome of the poison: "dead after 3 attempt(s): …", "discarded while blocking its group".
	Outcome string
	// Took is how long the run took from the first publish until everything settled.
	Took time.Duration
	// Recover is, for a poison that blocked its group, the time from Discard until the
	// rest of the group was delivered.
	Recover time.Duration
}

// poisonGroups and poisonPerGroup shape the case: every group gets poisonPerGroup
// messages, published round-robin; the poison is the third message of group "p0".
const (
	poisonGroups   = 4
	poisonPerGroup = 8
	poisonIndex    = 2
)

// RunPoison runs only the "Poison" case, for a harness whose destinations are set up
// for it (a queue with a small size limit, say) and would not suit the other cases.
func RunPoison(t *testing.T, h Harness) {
	t.Helper()
	timeout := h.Timeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	t.Run("Poison", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		testPoison(t, ctx, h)
	})
}

func testPoison(t *testing.T, ctx context.Context, h Harness) {
	if h.DB == nil || len(h.Poisons) == 0 {
		t.Skip("the harness names no poison message or no database (Harness.Poisons, Harness.DB)")
	}
	for _, p := range h.Poisons {
		for _, maxAttempts := range []int{3, 0} {
			variant := fmt.Sprintf("max-attempts=%d", maxAttempts)
			t.Run(p.Name+"/"+variant, func(t *testing.T) {
				res := PoisonResult{Poison: p, Variant: variant}
				if h.PoisonScore != nil {
					// Cleanups run after the test body, so the score sees whether it failed.
					t.Cleanup(func() { h.PoisonScore(t, res) })
				}
				runPoison(t, ctx, h, p, maxAttempts, &res)
			})
		}
	}
}

// countingRelay hands batches on and counts how often each message was handed.
type countingRelay struct {
	core.Relay
	mu     sync.Mutex
	handed map[int64]int
}

func (c *countingRelay) count(batch []core.Envelope) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range batch {
		c.handed[e.ID]++
	}
}

func (c *countingRelay) times(id int64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.handed[id]
}

func (c *countingRelay) Deliver(ctx context.Context, batch []core.Envelope) error {
	c.count(batch)
	return c.Relay.Deliver(ctx, batch)
}

// countingTxRelay keeps a TxRelay a TxRelay, so that the engine still calls DeliverTx.
type countingTxRelay struct{ *countingRelay }

func (c countingTxRelay) DeliverTx(ctx context.Context, tx *sql.Tx, batch []core.Envelope) error {
	c.count(batch)
	return c.Relay.(core.TxRelay).DeliverTx(ctx, tx, batch)
}

func runPoison(t *testing.T, ctx context.Context, h Harness, p Poison, maxAttempts int, res *PoisonResult) {
	tg := newTarget(t, h)
	counter := &countingRelay{Relay: tg.Relay, handed: map[int64]int{}}
	var relay core.Relay = counter
	if _, ok := tg.Relay.(core.TxRelay); ok {
		relay = countingTxRelay{counter}
	}
	const outbox = "sinktest"
	db := h.DB(t)
	ob, err := core.New(core.Config{
		DB:     db,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Outboxes: map[string]core.OutboxConfig{outbox: {
			Relay:        relay,
			MaxAttempts:  maxAttempts,
			BatchSize:    10,
			PollInterval: 10 * time.Millisecond,
			Backoff:      core.Backoff{Min: 5 * time.Millisecond, Max: 50 * time.Millisecond},
		}},
	})
	if err != nil {
		t.Fatalf("core.New: %v", err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}

	// Publish in one transaction, round-robin over the groups.
	start := time.Now()
	msgs := make([]core.Message, 0, poisonGroups*poisonPerGroup)
	for i := range poisonPerGroup {
		for g := range poisonGroups {
			payload := fmt.Appendf(nil, `{"group":%d,"n":%d}`, g, i)
			if g == 0 && i == poisonIndex {
				payload = p.Payload
			}
			msgs = append(msgs, core.Raw{To: outbox, Type: "sinktest.Poison", Key: fmt.Sprintf("p%d", g), Data: payload})
		}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	envs, err := ob.PublishAll(ctx, tx, msgs)
	if err != nil {
		_ = tx.Rollback()
		t.Fatalf("PublishAll: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	res.Published, res.Committed = len(envs), len(envs)
	poison := envs[poisonIndex*poisonGroups]
	if poison.GroupKey != "p0" {
		t.Fatalf("the poison went into group %q, want p0", poison.GroupKey)
	}
	var others []core.Envelope // every message but the poison, in ID order
	var behind []core.Envelope // the messages of the poison's group after it
	for _, e := range envs {
		if e.ID == poison.ID {
			continue
		}
		others = append(others, e)
		if e.GroupKey == poison.GroupKey && e.ID > poison.ID {
			behind = append(behind, e)
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ob.Run(runCtx) }()
	stopped := false
	stopRun := func() {
		if stopped {
			return
		}
		stopped = true
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	defer stopRun()

	counts := func() core.Counts {
		t.Helper()
		// Not ctx: the counts go into the message when ctx ran out.
		c, err := ob.Counts(context.WithoutCancel(ctx), outbox)
		if err != nil {
			t.Fatalf("Counts: %v", err)
		}
		return c
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if ctx.Err() != nil {
				t.Fatalf("timed out waiting for %s (counts %+v, the poison handed %d time(s))", what, counts(), counter.times(poison.ID))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	blocks := maxAttempts == 0 && !p.Permanent
	if blocks {
		// Retried forever: everything outside the poison's group arrives, the poison is
		// tried again and again, and its group waits behind it.
		ahead := map[int64]bool{}
		for _, e := range others {
			if e.GroupKey != poison.GroupKey || e.ID < poison.ID {
				ahead[e.ID] = true
			}
		}
		waitArrived(t, ctx, tg, ahead)
		waitFor("the poison to be retried 3 times", func() bool { return counter.times(poison.ID) >= 3 })
		// The other groups' messages arrived; their confirmations may still be on the way
		// (a relay answers for a whole batch).
		waitFor(fmt.Sprintf("only the poison and the %d message(s) behind it pending, none dead", len(behind)), func() bool {
			c := counts()
			return c.Dead == 0 && c.Pending == int64(1+len(behind))
		})
		pending, err := ob.ListPending(ctx, outbox, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(pending) == 0 || pending[0].ID != poison.ID || pending[0].Attempts < 1 || !strings.Contains(pending[0].LastError, p.Reason) {
			t.Errorf("pending head %+v, want the poison %d with attempts and a last error containing %q", head1(pending), poison.ID, p.Reason)
		}
		// The messages behind the poison stay pending, in order, behind it. (A sink may
		// have sent some of them in the batch that held the poison, withholding credit
		// for them: they arrive again after Discard, at least once.)
		for i, e := range behind {
			if i+1 >= len(pending) || pending[i+1].ID != e.ID {
				t.Errorf("pending %v, want the poison %d followed by its group's %v", ids(pending), poison.ID, ids(behind))
				break
			}
		}
		res.Attempts = counter.times(poison.ID)
		n, err := ob.Discard(ctx, outbox, poison.ID)
		if err != nil || n != 1 {
			t.Fatalf("Discard(%d): %d, %v; want 1 discarded", poison.ID, n, err)
		}
		discarded := time.Now()
		waitFor("the rest of the poison's group after Discard", func() bool { return counts().Pending == 0 })
		res.Recover = time.Since(discarded)
		res.Outcome = fmt.Sprintf("blocked its group through %d attempt(s); after Discard the group went on", res.Attempts)
	} else {
		waitFor("the backlog to settle", func() bool { c := counts(); return c.Pending == 0 && c.Dead == 1 })
		dead, err := ob.ListDead(ctx, outbox, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(dead) != 1 || dead[0].ID != poison.ID {
			t.Fatalf("dead messages %v, want only the poison %d", ids(dead), poison.ID)
		}
		want := maxAttempts
		if p.Permanent {
			want = 1 // core.Permanent: dead at once, whatever MaxAttempts says
		}
		res.Attempts = counter.times(poison.ID)
		if dead[0].Attempts != want || res.Attempts != want {
			t.Errorf("the poison died after %d attempt(s), handed to the relay %d time(s); want %d", dead[0].Attempts, res.Attempts, want)
		}
		if !strings.Contains(dead[0].LastError, p.Reason) {
			t.Errorf("the dead letter's last error %q does not say %q", dead[0].LastError, p.Reason)
		}
		res.Outcome = fmt.Sprintf("dead after %d attempt(s): %s", dead[0].Attempts, dead[0].LastError)
	}
	got := read(t, ctx, tg, len(others))
	res.Took = time.Since(start)
	stopRun()

	// What arrived: every other message, each group in order, the poison never.
	seen := map[int64]int{}
	last := map[string]int64{}
	for _, r := range got {
		if r.ID == poison.ID {
			t.Errorf("the poison %d arrived (%d bytes)", r.ID, len(r.Payload))
			continue
		}
		seen[r.ID]++
		if seen[r.ID] > 1 {
			res.Duplicated++
			continue
		}
		res.Delivered++
		if prev := last[r.GroupKey]; prev > r.ID {
			res.Reordered++
			t.Errorf("group %q: message %d arrived after message %d", r.GroupKey, r.ID, prev)
		}
		last[r.GroupKey] = max(last[r.GroupKey], r.ID)
	}
	for _, e := range others {
		if seen[e.ID] == 0 {
			res.Lost++
			t.Errorf("message %d (group %s) never arrived", e.ID, e.GroupKey)
		}
	}
	if n := counter.times(poison.ID); !blocks && n != res.Attempts {
		t.Errorf("the poison was handed to the relay %d time(s) after it was settled at %d", n, res.Attempts)
	}
}

// waitArrived waits until every message in want arrived at the destination.
func waitArrived(t *testing.T, ctx context.Context, tg *Target, want map[int64]bool) {
	t.Helper()
	n := 0
	for {
		got := read(t, ctx, tg, n)
		missing := len(want)
		seen := map[int64]bool{}
		for _, r := range got {
			if want[r.ID] && !seen[r.ID] {
				seen[r.ID] = true
				missing--
			}
		}
		if missing == 0 {
			return
		}
		n = len(got) + 1
	}
}

func head1(envs []core.Envelope) any {
	if len(envs) == 0 {
		return "none"
	}
	e := envs[0]
	return fmt.Sprintf("{ID:%d Attempts:%d LastError:%q}", e.ID, e.Attempts, e.LastError)
}

func ids(envs []core.Envelope) []int64 {
	out := make([]int64, len(envs))
	for i, e := range envs {
		out[i] = e.ID
	}
	return out
}
