package kafka_test

// The inbox's end-to-end scenario (reliability scenario 12 through a broker):
// publishers → outbox → relay process → Kafka (kfake, in this process) → consumer
// process (kafka.Consumer with the inbox and its stale check) → a table of effects, with
// the relay and the consumer SIGKILLed at random moments and restarted. The test binary
// runs itself as the relay and consumer processes (TestE2EHelperProcess).

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
	"github.com/outboxer-go/outboxer/sinks/kafka"
)

const e2eHelperEnv = "OUTBOXER_E2E_HELPER"

// e2eKey names a message: its group and its place in the group's publishing sequence.
type e2eKey struct {
	grp string
	n   int
}

// TestE2EHelperProcess is the relay or the consumer process of TestChaosInboxEndToEnd;
// it does nothing in a normal test run.
func TestE2EHelperProcess(t *testing.T) {
	role := os.Getenv(e2eHelperEnv)
	if role == "" {
		t.Skip("helper process of TestChaosInboxEndToEnd")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var err error
	switch role {
	case "relay":
		err = e2eRelay(ctx)
	case "consumer":
		err = e2eConsumer(ctx)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, role+":", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// e2eRelay relays the "orders" outbox of E2E_SRC_* to the "orders" topic until ctx ends.
func e2eRelay(ctx context.Context) error {
	db, err := sql.Open(os.Getenv("E2E_SRC_DRIVER"), os.Getenv("E2E_SRC_DSN"))
	if err != nil {
		return err
	}
	defer db.Close()
	relay, err := kafka.New(kafka.Config{Brokers: strings.Split(os.Getenv("E2E_BROKERS"), ","), Topic: "orders"})
	if err != nil {
		return err
	}
	defer relay.Close()
	ob, err := core.New(core.Config{
		DB: db, Dialect: core.Dialect(os.Getenv("E2E_DIALECT")), LeaseDuration: time.Second,
		Logger: slog.New(slog.DiscardHandler),
		Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: relay, BatchSize: 20, PollInterval: 20 * time.Millisecond,
			Backoff: core.Backoff{Func: func(int) time.Duration { return 20 * time.Millisecond }},
		}},
	})
	if err != nil {
		return err
	}
	return ob.Run(ctx)
}

// e2eConsumer consumes the "orders" topic in the group "billing" with the inbox of
// E2E_DST_*, writing one effect row per record in the record's transaction, until ctx
// ends. A failed Run (a database error, say) is logged and the consumer rebuilt, as a
// supervisor would.
func e2eConsumer(ctx context.Context) error {
	db, err := sql.Open(os.Getenv("E2E_DST_DRIVER"), os.Getenv("E2E_DST_DSN"))
	if err != nil {
		return err
	}
	defer db.Close()
	in, err := inbox.New(inbox.Config{DB: db, Dialect: core.Dialect(os.Getenv("E2E_DIALECT")), StaleCheck: true})
	if err != nil {
		return err
	}
	handler := func(ctx context.Context, tx *sql.Tx, rec *kgo.Record, o inbox.Outcome) error {
		var v struct{ N int }
		if err := json.Unmarshal(rec.Value, &v); err != nil {
			return fmt.Errorf("payload %q: %w", rec.Value, err)
		}
		time.Sleep(time.Duration(rand.IntN(4)) * time.Millisecond) // widen the moments a kill lands mid-fetch
		stale := 0
		if o == inbox.Stale {
			stale = 1 // written anyway: the test counts it as reordered
		}
		// pos: the order effects commit in (one consumer process at a time).
		_, err := tx.ExecContext(ctx, fmt.Sprintf(
			`INSERT INTO e2e_effects (pos, grp, n, stale) SELECT COALESCE(MAX(pos), 0) + 1, '%s', %d, %d FROM e2e_effects`,
			string(rec.Key), v.N, stale))
		return err
	}
	for ctx.Err() == nil {
		cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(os.Getenv("E2E_BROKERS"), ",")...),
			kgo.ConsumerGroup("billing"), kgo.ConsumeTopics("orders"), kgo.DisableAutoCommit(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond),
			kgo.SessionTimeout(1500*time.Millisecond), kgo.HeartbeatInterval(150*time.Millisecond),
			kgo.RebalanceTimeout(3*time.Second), kgo.WithHooks(receivedHook{db}))
		if err != nil {
			return err
		}
		c, err := kafka.NewConsumer(kafka.ConsumerConfig{Client: cl, Inbox: in, Name: "billing", Handler: handler})
		if err != nil {
			cl.Close()
			return err
		}
		if err := c.Run(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "consumer: Run:", err, "(rebuilding)")
			time.Sleep(100 * time.Millisecond)
		}
		cl.Close()
	}
	return nil
}

// receivedHook records each record the consumer polls (outside any transaction), to
// count what the broker and the relay delivered again.
type receivedHook struct{ db *sql.DB }

func (h receivedHook) OnFetchRecordUnbuffered(rec *kgo.Record, polled bool) {
	if !polled {
		return
	}
	_, _ = h.db.Exec(fmt.Sprintf(`INSERT INTO e2e_received (grp, id) VALUES ('%s', %d)`, string(rec.Key), recordID(rec)))
}

// e2eProc is a helper process the test kills and restarts.
type e2eProc struct {
	t      *testing.T
	role   string
	env    []string
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	log    strings.Builder // stderr of the earlier incarnations
	starts int
}

func (p *e2eProc) start() {
	p.t.Helper()
	p.stderr = new(bytes.Buffer)
	p.cmd = exec.Command(os.Args[0], "-test.run=^TestE2EHelperProcess$", "-test.count=1")
	p.cmd.Env = append(append(os.Environ(), e2eHelperEnv+"="+p.role), p.env...)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("starting the %s process: %v", p.role, err)
	}
	p.starts++
}

// kill SIGKILLs the process and waits for it; it fails the test if the process had
// ended on its own.
func (p *e2eProc) kill() {
	p.t.Helper()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	err := p.cmd.Wait()
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		p.t.Errorf("the %s process ended by itself before it was killed: %v; stderr:\n%s", p.role, err, p.stderr)
	}
	fmt.Fprintf(&p.log, "--- %s #%d:\n%s", p.role, p.starts, p.stderr)
	p.cmd = nil
}

func TestChaosInboxEndToEnd(t *testing.T) {
	if os.Getenv(e2eHelperEnv) != "" {
		t.Skip("in a helper process")
	}
	groups := 8
	minPerGroup := dbtest.Pick(20, 500*max(1, dbtest.ChaosScale()))
	kills := dbtest.Pick(4, 12)
	dbtest.ForEach(t, func(t *testing.T, src *dbtest.DB) {
		dst := dbtest.Open(t, src.Dialect) // the consumer's own database
		seed := rand.Uint64()
		rng := rand.New(rand.NewPCG(seed, 20))
		t.Logf("seed %d", seed)
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(dbtest.Pick(3, 30))*time.Minute)
		defer cancel()

		kc, err := kfake.NewCluster(kfake.SeedTopics(3, "orders"), kfake.GroupMinSessionTimeout(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer kc.Close()

		// The publishers' outboxer only publishes (Manual: no workers).
		pubRelay, err := kafka.New(kafka.Config{Brokers: kc.ListenAddrs(), Topic: "orders"})
		if err != nil {
			t.Fatal(err)
		}
		defer pubRelay.Close()
		ob, err := core.New(core.Config{DB: src.DB, Dialect: src.Dialect, Manual: true, Logger: slog.New(slog.DiscardHandler),
			Outboxes: map[string]core.OutboxConfig{"orders": {Relay: pubRelay}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := ob.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		in, err := inbox.New(inbox.Config{DB: dst.DB, Dialect: dst.Dialect, StaleCheck: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := in.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := dst.ExecContext(ctx, `CREATE TABLE e2e_received (grp VARCHAR(16) NOT NULL, id BIGINT NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		if _, err := dst.ExecContext(ctx, `CREATE TABLE e2e_effects (pos BIGINT NOT NULL, grp VARCHAR(16) NOT NULL, n BIGINT NOT NULL, stale INT NOT NULL)`); err != nil {
			t.Fatal(err)
		}

		env := []string{
			"E2E_BROKERS=" + strings.Join(kc.ListenAddrs(), ","), "E2E_DIALECT=" + string(src.Dialect),
			"E2E_SRC_DRIVER=" + src.Driver, "E2E_SRC_DSN=" + src.DSN,
			"E2E_DST_DRIVER=" + dst.Driver, "E2E_DST_DSN=" + dst.DSN,
		}
		relayProc := &e2eProc{t: t, role: "relay", env: env}
		consumerProc := &e2eProc{t: t, role: "consumer", env: env}
		defer func() {
			relayProc.kill()
			consumerProc.kill()
			if t.Failed() {
				t.Logf("helper output:\n%s%s", relayProc.log.String(), consumerProc.log.String())
			}
		}()
		relayProc.start()
		consumerProc.start()

		// Publishers: one per group, each publishing its group's messages in order, four
		// to a transaction; every fifth transaction rolls back.
		var mu sync.Mutex
		committed := map[e2eKey]bool{}
		published := 0
		var killsDone atomic.Bool
		var wg sync.WaitGroup
		pubErr := make(chan error, groups)
		defer func() { killsDone.Store(true); wg.Wait() }() // publishers stop on a failure too
		for g := range groups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				grp := fmt.Sprintf("g%d", g)
				for i := 0; i < minPerGroup || !killsDone.Load(); i += 2 {
					msgs := []core.Message{}
					for n := i; n < i+2; n++ {
						msgs = append(msgs, core.Raw{To: "orders", Type: "order.placed", Key: grp, Data: fmt.Appendf(nil, `{"n":%d}`, n)})
					}
					tx, err := src.BeginTx(ctx, nil)
					if err == nil {
						_, err = ob.PublishAll(ctx, tx, msgs)
					}
					if err != nil {
						if tx != nil {
							_ = tx.Rollback()
						}
						pubErr <- fmt.Errorf("publishing %s %d: %w", grp, i, err)
						return
					}
					rollback := (i/2)%5 == 2
					if rollback {
						err = tx.Rollback()
					} else {
						err = tx.Commit()
					}
					if err != nil {
						pubErr <- fmt.Errorf("ending %s %d: %w", grp, i, err)
						return
					}
					mu.Lock()
					published += len(msgs)
					if !rollback {
						for n := i; n < i+2; n++ {
							committed[e2eKey{grp, n}] = true
						}
					}
					mu.Unlock()
					time.Sleep(time.Duration(100+rng2(g, i)%300) * time.Millisecond)
				}
			}()
		}

		countEffects := func() int {
			var n int
			if err := dst.QueryRowContext(ctx, `SELECT COUNT(*) FROM e2e_effects`).Scan(&n); err != nil {
				t.Fatalf("counting effects: %v", err)
			}
			return n
		}
		// waitFor polls cond until it holds or the deadline passes, then fails with what.
		waitFor := func(d time.Duration, what func() string, cond func() bool) {
			t.Helper()
			deadline := time.Now().Add(d)
			for !cond() {
				if time.Now().After(deadline) || ctx.Err() != nil {
					t.Fatalf("gave up after %v waiting for %s", d, what())
				}
				time.Sleep(50 * time.Millisecond)
			}
		}

		// Kill the consumer at random moments once it made progress since its restart (while
		// it is busy: the publishers go on until the kills are done), and the relay every
		// other time; restart them at once.
		consumerKills, relayKills := 0, 0
		last := 0
		for k := range kills {
			waitFor(90*time.Second, func() string {
				return fmt.Sprintf("the consumer to commit effects beyond %d (kill %d)", last, k+1)
			}, func() bool { return countEffects() > last })
			time.Sleep(time.Duration(rng.IntN(150)) * time.Millisecond)
			consumerProc.kill()
			consumerKills++
			if k%2 == 1 {
				relayProc.kill()
				relayKills++
				relayProc.start()
			}
			last = countEffects()
			consumerProc.start()
		}
		killsDone.Store(true)
		wg.Wait()
		close(pubErr)
		for err := range pubErr {
			t.Fatal(err)
		}
		mu.Lock()
		want := len(committed)
		mu.Unlock()
		waitFor(2*time.Minute, func() string {
			return fmt.Sprintf("%d effects (one per committed message), have %d", want, countEffects())
		}, func() bool { return countEffects() >= want })
		// Let any redelivery in flight land before counting.
		relayProc.kill()
		time.Sleep(500 * time.Millisecond)
		consumerProc.kill()

		// Count: each committed message once, nothing else, per group in publishing order.
		rows, err := dst.QueryContext(ctx, `SELECT grp, n, stale FROM e2e_effects ORDER BY pos`)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[e2eKey]int{}
		lastN := map[string]int{}
		stale, reordered, phantom := 0, 0, 0
		for rows.Next() {
			var k e2eKey
			var s int
			if err := rows.Scan(&k.grp, &k.n, &s); err != nil {
				t.Fatal(err)
			}
			seen[k]++
			stale += s
			if p, ok := lastN[k.grp]; ok && k.n <= p {
				reordered++
			}
			lastN[k.grp] = k.n
			if !committed[k] && seen[k] == 1 {
				phantom++
			}
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		lost, doubled := 0, 0
		for k := range committed {
			switch n := seen[k]; {
			case n == 0:
				lost++
			case n > 1:
				doubled += n - 1
			}
		}
		var received, receivedDistinct int
		if err := dst.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT id) FROM e2e_received`).Scan(&received, &receivedDistinct); err != nil {
			t.Fatal(err)
		}
		// What the broker carried: the relay's duplicates (a batch sent again after a kill).
		records := topicRecords(t, ctx, kc.ListenAddrs())
		notes := fmt.Sprintf("consumer SIGKILLed %d times, relay %d times; the topic holds %d records for %d committed messages; the consumers polled %d records, %d of them again (skipped by the inbox); seed %d",
			consumerKills, relayKills, records, want, received, received-receivedDistinct, seed)
		t.Log(notes)
		if lost != 0 || doubled != 0 || phantom != 0 {
			t.Errorf("effects: %d lost, %d doubled, %d of rolled-back messages, of %d committed", lost, doubled, phantom, want)
		}
		if reordered != 0 || stale != 0 {
			t.Errorf("effects out of group order: %d (stale outcomes %d)", reordered, stale)
		}
		if records < want {
			t.Errorf("the topic holds %d records, fewer than the %d committed messages", records, want)
		}
		dbtest.Record(t, dbtest.Score{Scenario: "12 effectively once (inbox)", Variant: "kafka end to end",
			Database: string(src.Dialect), Published: published, Committed: want, Delivered: len(seen) - phantom,
			Lost: lost, Phantom: phantom, Reordered: reordered + stale, Duplicated: doubled, Notes: notes})
	})
}

// rng2 is a small deterministic jitter for a publisher (no shared generator across goroutines).
func rng2(g, i int) int { return (g*7919 + i*104729) & 0xffff }

// topicRecords counts the records of the "orders" topic, reading it from the start
// outside any group.
func topicRecords(t *testing.T, ctx context.Context, brokers []string) int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	end := endOffsets(t, ctx, cl)
	n := 0
	for n < end && ctx.Err() == nil {
		n += len(cl.PollFetches(ctx).Records())
	}
	return n
}

// endOffsets sums the end offsets of the "orders" topic's partitions: how many records
// it holds.
func endOffsets(t *testing.T, ctx context.Context, cl *kgo.Client) int {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "orders"
	for p := range int32(3) {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = p
		rp.Timestamp = -1 // the end
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("listing the topic's end offsets: %v", err)
	}
	n := 0
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				t.Fatalf("end offset of orders/%d: %v", rp.Partition, err)
			}
			n += int(rp.Offset)
		}
	}
	return n
}
