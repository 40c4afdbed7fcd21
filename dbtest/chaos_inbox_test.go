package dbtest_test

// Scenario 12 of the reliability suite: effectively once through the inbox. Relay
// processes are SIGKILLed mid-batch as in scenario 3, so the sink's log (the deliveries
// table, standing in for a broker's topic) holds the killed batches twice. While they
// run, a consumer reads the log in order with the inbox and the stale check on, and
// dies at random: inside its handler after the handler's write (the transaction rolls
// back), and after its transactions committed but before it committed its position in
// the log (what it read since comes again, as a broker redelivers to a restarted
// consumer). What a user depends on: exactly one effect per committed message, none
// lost, none doubled, and each group's effects in order.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
)

func TestChaosInboxEffectivelyOnce(t *testing.T) {
	dbtest.ForEach(t, inboxEffectivelyOnce)
}

// errConsumerKilled stands for the consumer dying inside its handler.
var errConsumerKilled = errors.New("consumer killed inside its handler")

// inboxConsumerStats is what the consumer went through.
type inboxConsumerStats struct {
	handled, duplicates, stale  int // outcomes of transactions that committed
	handlerKills, positionKills int // deaths inside the handler / before committing its position
}

// inboxConsume reads the log (deliveries, by seq) from position 0 with the inbox until
// stop is set and it has committed its position at the log's end. Its position lives in
// memory, as a broker keeps a group's committed offsets: a death goes back to it.
func inboxConsume(ctx context.Context, db *dbtest.DB, in *inbox.Inbox, seed uint64, stop *atomic.Bool) (inboxConsumerStats, error) {
	rng := rand.New(rand.NewPCG(seed, 12))
	var st inboxConsumerStats
	var committed, pos int64
	type entry struct {
		seq, msgID int64
		grp        string
	}
	for ctx.Err() == nil {
		rows, err := db.QueryContext(ctx, crashQ(db, `SELECT seq, msg_id, grp FROM deliveries WHERE seq > ? ORDER BY seq LIMIT 10`), pos)
		if err != nil {
			return st, err
		}
		var batch []entry
		for rows.Next() {
			var e entry
			if err := rows.Scan(&e.seq, &e.msgID, &e.grp); err != nil {
				rows.Close()
				return st, err
			}
			batch = append(batch, e)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return st, err
		}
		if len(batch) == 0 {
			if stop.Load() && committed == pos {
				return st, nil
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		died := false
		for _, e := range batch {
			kill := rng.IntN(20) == 0
			m := inbox.Message{Key: core.MessageKey("", core.DefaultTable, e.msgID), Group: inbox.GroupOf("orders", e.grp), Seq: e.msgID}
			o, err := in.Handle(ctx, "billing", m, func(ctx context.Context, tx *sql.Tx, o inbox.Outcome) error {
				if _, err := tx.ExecContext(ctx, crashQ(db, `INSERT INTO inbox_effects (n, msg_id, grp) VALUES (?, ?, ?)`), e.seq, e.msgID, e.grp); err != nil {
					return err
				}
				if kill {
					return errConsumerKilled
				}
				return nil
			})
			if errors.Is(err, errConsumerKilled) {
				st.handlerKills++
				died = true
				break
			}
			if err != nil {
				return st, err
			}
			switch o {
			case inbox.Claimed:
				st.handled++
			case inbox.Duplicate:
				st.duplicates++
			case inbox.Stale:
				st.stale++
			}
			pos = e.seq
		}
		if !died && rng.IntN(4) == 0 {
			st.positionKills++
			died = true
		}
		if died {
			pos = committed // restarted: the log comes again from the committed position
			continue
		}
		committed = pos
	}
	return st, ctx.Err()
}

func inboxEffectivelyOnce(t *testing.T, db *dbtest.DB) {
	ctx := context.Background()
	const n = 20 // batch size
	rounds := dbtest.Pick(3, 40*max(1, dbtest.ChaosScale()))
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 7))
	t.Logf("%d rounds, seed %d", rounds, seed)

	ob := setup(t, db, core.Config{PublishOnly: true, Outboxes: map[string]core.OutboxConfig{"orders": {Partitions: 2}}})
	crashTables(t, db)
	in, err := inbox.New(inbox.Config{DB: db.DB, Dialect: db.Dialect, StaleCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE inbox_effects (n BIGINT NOT NULL, msg_id BIGINT NOT NULL, grp VARCHAR(255) NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	total := rounds*3*n + 4*n
	committed := map[int64]string{}
	for i := 0; i < total; i += 100 {
		msgs := make([]core.Message, min(100, total-i))
		for j := range msgs {
			msgs[j] = event{Seq: i + j, Group: fmt.Sprintf("order:%d", (i+j)%16)}
		}
		for _, e := range publish(t, ob, db.DB, msgs...) {
			committed[e.ID] = e.GroupKey
		}
	}

	// The consumer runs while the relays are killed and restarted.
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var stop atomic.Bool
	type result struct {
		st  inboxConsumerStats
		err error
	}
	consumed := make(chan result, 1)
	go func() {
		st, err := inboxConsume(cctx, db, in, seed, &stop)
		consumed <- result{st, err}
	}()
	defer func() { stop.Store(true); cancel() }()

	cfg := helperFor(db)
	cfg.Partitions, cfg.BatchSize, cfg.Lease, cfg.BatchColumn = 2, n, time.Second, true
	cfg.OrderedLog = true // the consumer reads the log while the relays write it
	var acked int
	for r := range rounds {
		k := rng.IntN(n + 1)
		if r == 1 {
			k = n
		}
		cfg.KillBatch, cfg.KillAcks = 2+rng.IntN(2), k
		victim := startRelay(t, cfg)
		victim.waitLine(t, "FIRST", 60*time.Second)
		c := parseCrashKill(t, victim.waitLine(t, "KILL ", 60*time.Second))
		crashWaitKilled(t, victim)
		acked += c.k
		if _, err := db.ExecContext(ctx, crashQ(db, `DELETE FROM active WHERE pid = ?`), victim.cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
	}
	cfg.KillBatch, cfg.KillAcks = 0, 0
	heir := startRelay(t, cfg)
	// Up and serving before anything can stop it: when the victims' batches already
	// logged every message, a SIGTERM right after the start would find the process before
	// its signal handler is installed.
	heir.waitLine(t, "READY", 60*time.Second)
	eventually(t, 120*time.Second, "every message in the log", func() bool { return allConfirmed(t, db, ob, "orders", total) })
	heir.stop(t)
	var logged int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM deliveries`).Scan(&logged); err != nil {
		t.Fatal(err)
	}

	stop.Store(true)
	res := <-consumed
	if res.err != nil {
		t.Fatalf("consumer: %v", res.err)
	}
	st := res.st

	rows, err := db.QueryContext(ctx, `SELECT msg_id, grp FROM inbox_effects ORDER BY n`)
	if err != nil {
		t.Fatal(err)
	}
	var effects []dbtest.Delivery
	for rows.Next() {
		var d dbtest.Delivery
		if err := rows.Scan(&d.ID, &d.GroupKey); err != nil {
			t.Fatal(err)
		}
		effects = append(effects, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	score := dbtest.Tally(dbtest.Score{Scenario: "12 effectively once (inbox)",
		Variant:  fmt.Sprintf("relay SIGKILL after k of %d acks ×%d, consumer dies in its handler or before committing its position", n, rounds),
		Database: string(db.Dialect), Published: total,
		Notes: fmt.Sprintf("log %d deliveries for %d messages (%d acked by killed batches); consumer: %d handled, %d duplicates skipped, %d stale, %d deaths in the handler, %d before committing its position",
			logged, total, acked, st.handled, st.duplicates, st.stale, st.handlerKills, st.positionKills)}, committed, effects)
	if score.Lost != 0 || score.Duplicated != 0 || score.Phantom != 0 || score.Reordered != 0 || score.Delivered != total {
		t.Errorf("effects: %d of %d messages, lost %d, doubled %d, phantom %d, reordered %d: want exactly one each, in group order",
			score.Delivered, total, score.Lost, score.Duplicated, score.Phantom, score.Reordered)
	}
	if st.handled != total || st.stale != 0 {
		t.Errorf("the consumer claimed %d messages and saw %d stale, want %d and 0", st.handled, st.stale, total)
	}
	// The test must have exercised the duplicates: the log repeats what killed batches acked,
	// and the consumer's deaths before committing its position read records again.
	if logged < total+acked || st.duplicates < logged-total {
		t.Errorf("log of %d deliveries for %d messages with %d acked by killed batches; %d duplicates skipped", logged, total, acked, st.duplicates)
	}
	t.Log(score.Notes)
	dbtest.Record(t, score)
}
