package dbtest_test

// Reliability scenario 17: poison messages among other groups. A relay fails the
// deliveries of a few poison messages, spread over groups and batches: a TxRelay names
// them in a PartialFailure after their delivery aborted the transaction (PostgreSQL) or
// used up the delivery deadline; a plain Relay fails every batch that holds one with a
// plain error. Only the poison messages may go dead: every other message is delivered,
// once, in its group's order. Before the engine narrowed failed batches, the TxRelay's
// batch-mates were charged the poison message's attempts and went dead with it, and the
// plain Relay's charged the first message of every group in the batch.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

func TestChaosPoisonAmongOtherGroups(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		t.Parallel()
		for _, variant := range []string{"TxRelay, aborting statement", "TxRelay, delivery deadline", "Relay, plain error"} {
			t.Run(variant, func(t *testing.T) { chaosPoisonAmongOtherGroups(t, db, variant) })
		}
	})
}

func chaosPoisonAmongOtherGroups(t *testing.T, db *dbtest.DB, variant string) {
	ctx := context.Background()
	const attempts = 2
	total := dbtest.Pick(60, 600) * max(dbtest.ChaosScale(), 1)
	score := dbtest.Score{Scenario: "17 poison messages among other groups", Variant: variant, Database: chaosScore(db)}
	defer func() { dbtest.Record(t, score) }()

	var (
		mu     sync.Mutex
		poison = map[int64]bool{}
		calls  atomic.Int32
		relay  core.Relay
		txr    *poisonTxRelay
		sink   = newChaosSink()
	)
	box := fmt.Sprintf("poison%d", len(variant)) // each variant its own outbox
	if variant == "Relay, plain error" {
		relay = core.RelayFunc(func(ctx context.Context, batch []core.Envelope) error {
			calls.Add(1)
			mu.Lock()
			for _, e := range batch {
				if poison[e.ID] {
					mu.Unlock()
					return errors.New("the broker rejects the batch: one of its messages is malformed")
				}
			}
			mu.Unlock()
			return sink.Deliver(ctx, batch)
		})
	} else {
		createJobs(t, db)
		txr = &poisonTxRelay{dialect: db.Dialect, deadline: variant == "TxRelay, delivery deadline"}
		relay = txr
	}
	ob := setup(t, db, core.Config{Outboxes: map[string]core.OutboxConfig{box: {
		Relay: relay, MaxAttempts: attempts, BatchSize: 16, PollInterval: 10 * time.Millisecond,
		DeliveryTimeout: 100 * time.Millisecond, Backoff: core.Backoff{Min: time.Millisecond, Max: 20 * time.Millisecond}}}})

	// Six groups and ungrouped messages, interleaved; a poison message every 20, in a
	// group or in none.
	msgs := make([]core.Message, total)
	for i := range msgs {
		g := ""
		if i%7 != 6 {
			g = fmt.Sprint("g", i%7)
		}
		msgs[i] = event{Box: box, Seq: i, Group: g}
	}
	envs := publish(t, ob, db.DB, msgs...)
	committed := map[int64]string{} // the innocent messages; an ungrouped one is a group of its own
	mu.Lock()
	for i, e := range envs {
		if i%20 == 5 || i%20 == 13 {
			poison[e.ID] = true
			continue
		}
		committed[e.ID] = tallyGroup(e.GroupKey, e.ID)
	}
	if txr != nil {
		txr.mu.Lock()
		txr.poison = maps.Clone(poison)
		txr.mu.Unlock()
	}
	mu.Unlock()
	score.Published = len(envs)

	start := time.Now()
	run(t, ob)
	eventually(t, 120*time.Second, "nothing pending", func() bool { return counts(t, ob, box).Pending == 0 })
	took := time.Since(start)

	dead, err := ob.ListDead(ctx, box, 0)
	if err != nil {
		t.Fatal(err)
	}
	innocent := 0
	for _, d := range dead {
		if !poison[d.ID] {
			innocent++
		} else if d.Attempts != attempts {
			t.Errorf("poison message %d dead after %d attempts, want %d", d.ID, d.Attempts, attempts)
		}
	}
	var deliveries []dbtest.Delivery
	handed := 0
	if txr != nil {
		deliveries = jobs(t, db)
		handed = len(txr.handedOver())
	} else {
		deliveries = sink.deliveries()
		handed = int(calls.Load())
	}
	for i := range deliveries {
		deliveries[i].GroupKey = tallyGroup(deliveries[i].GroupKey, deliveries[i].ID)
	}
	score = dbtest.Tally(score, committed, deliveries)
	score.Committed = len(envs)
	score.Notes = fmt.Sprintf("%d poison messages, %d dead, %d of them innocent; %d relay calls in %v",
		len(poison), len(dead), innocent, handed, took.Round(time.Millisecond))
	if innocent != 0 || len(dead) != len(poison) {
		t.Errorf("%d dead, %d of them innocent; want the %d poison messages alone", len(dead), innocent, len(poison))
	}
	if score.Lost != 0 || score.Phantom != 0 || score.Reordered != 0 || score.Duplicated != 0 {
		t.Errorf("score %+v: want every innocent message delivered once, in its group's order", score)
	}
	for _, d := range deliveries {
		if poison[d.ID] {
			t.Errorf("poison message %d was delivered", d.ID)
		}
	}
}

// tallyGroup is the group Tally judges the order of a message in: its own, or, when it
// has none, one of its own (ungrouped messages have no order to keep).
func tallyGroup(group string, id int64) string {
	if group == "" {
		return fmt.Sprint("#", id)
	}
	return group
}
