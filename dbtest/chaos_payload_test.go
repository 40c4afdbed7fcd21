package dbtest_test

// Reliability scenario 8: huge payloads and big batches. Payloads of exactly
// MaxPayloadBytes are delivered byte for byte; one byte more is refused with
// ErrPayloadTooLarge and nothing of the call is written. A backlog many times a batch's
// bytes drains with the relay's heap bounded by the batch, not by the backlog.
//
// MariaDB: max_allowed_packet (16 MiB by default on 10.11) bounds one statement and one
// row. A multi-row PublishAll larger than it still goes through (the driver sends big
// arguments as long data, each bounded on its own); a single payload larger than it is
// refused by the server with a clear error and nothing written. Keep MaxPayloadBytes
// below max_allowed_packet on MariaDB.

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// plPayload returns n bytes of pseudo-random binary (every byte value occurs), fixed
// by seed.
func plPayload(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := rng.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// plSink keeps a digest of every payload it is handed, never the payload itself.
type plSink struct {
	mu   sync.Mutex
	got  map[int64][32]byte
	seen []dbtest.Delivery
	sent atomic.Int64 // payload bytes handed to the relay
}

func newPLSink() *plSink { return &plSink{got: map[int64][32]byte{}} }

func (s *plSink) Deliver(_ context.Context, batch []core.Envelope) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range batch {
		s.got[e.ID] = sha256.Sum256(e.Payload)
		s.seen = append(s.seen, dbtest.Delivery{ID: e.ID, GroupKey: e.GroupKey})
		s.sent.Add(int64(len(e.Payload)))
	}
	return nil
}

func (s *plSink) deliveries() []dbtest.Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]dbtest.Delivery(nil), s.seen...)
}

func (s *plSink) digest(id int64) ([32]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.got[id]
	return d, ok
}

func TestChaosPayloadLimits(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		ctx := context.Background()
		limit := dbtest.Pick(256<<10, core.DefaultMaxPayloadBytes)
		sink := newPLSink()
		ob := setup(t, db, core.Config{Manual: true, MaxPayloadBytes: limit,
			Outboxes: map[string]core.OutboxConfig{"orders": {Relay: sink}}})
		score := dbtest.Score{Scenario: "8 huge payloads", Variant: fmt.Sprintf("limit %d bytes", limit), Database: string(db.Dialect)}
		committed := map[int64]string{}
		defer func() {
			score = dbtest.Tally(score, committed, sink.deliveries())
			dbtest.Record(t, score)
		}()

		// Just under and at the limit: stored and delivered byte for byte.
		var want []core.Envelope
		digests := map[int64][32]byte{}
		for i, n := range []int{limit - 1, limit, 0, 1} {
			p := plPayload(uint64(i+1), n)
			score.Published++
			env, err := ob.Publish(ctx, db, core.Raw{To: "orders", Type: "big", Key: "g", Data: p})
			if err != nil {
				t.Fatalf("Publish of %d bytes (limit %d): %v", n, limit, err)
			}
			committed[env.ID] = env.GroupKey
			digests[env.ID] = sha256.Sum256(p)
			want = append(want, env)
		}

		// One byte over: refused, and nothing of the call is written, in a transaction
		// or not, alone or with a valid message.
		over := plPayload(99, limit+1)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		score.Published += 2
		_, err = ob.PublishAll(ctx, tx, []core.Message{
			core.Raw{To: "orders", Type: "ok", Key: "g", Data: []byte("fits")},
			core.Raw{To: "orders", Type: "big", Key: "g", Data: over},
		})
		if !errors.Is(err, core.ErrPayloadTooLarge) || !strings.Contains(err.Error(), fmt.Sprint(limit)) {
			t.Errorf("PublishAll with a payload of %d bytes (limit %d): %v, want ErrPayloadTooLarge naming the limit", limit+1, limit, err)
		}
		// The transaction is still usable: the refusal came before any statement.
		if err := tx.Commit(); err != nil {
			t.Errorf("commit after the refusal: %v", err)
		}
		score.Published++
		if _, err := ob.Publish(ctx, db, core.Raw{To: "orders", Type: "big", Key: "g", Data: over}); !errors.Is(err, core.ErrPayloadTooLarge) {
			t.Errorf("Publish of %d bytes (limit %d): %v, want ErrPayloadTooLarge", limit+1, limit, err)
		}
		if c := counts(t, ob, "orders"); c.Pending != int64(len(want)) {
			t.Errorf("pending %d after the refusals, want the %d accepted", c.Pending, len(want))
		}

		if _, err := ob.Drain(ctx, "orders"); err != nil {
			t.Fatalf("Drain: %v", err)
		}
		for _, e := range want {
			got, ok := sink.digest(e.ID)
			if !ok || got != digests[e.ID] {
				t.Errorf("message %d (%d bytes) not delivered byte for byte (delivered %v)", e.ID, len(e.Payload), ok)
			}
		}
		if c := counts(t, ob, "orders"); c.Pending != 0 {
			t.Errorf("pending %d after Drain", c.Pending)
		}
		score.Notes = fmt.Sprintf("%d and %d bytes delivered byte for byte; %d bytes refused with ErrPayloadTooLarge, nothing written", limit-1, limit, limit+1)
	})
}

// MariaDB's max_allowed_packet against payloads: what a user who raises MaxPayloadBytes
// past it gets.
func TestChaosPayloadMariaDBMaxAllowedPacket(t *testing.T) {
	db := dbtest.MariaDB(t)
	ctx := context.Background()
	var packet int
	if err := db.QueryRowContext(ctx, `SELECT @@max_allowed_packet`).Scan(&packet); err != nil {
		t.Fatal(err)
	}
	t.Logf("max_allowed_packet = %d", packet)
	sink := newPLSink()
	ob := setup(t, db, core.Config{Manual: true, MaxPayloadBytes: packet + 1<<20,
		Outboxes: map[string]core.OutboxConfig{"orders": {Relay: sink}}})

	// Many payloads in one PublishAll, together over max_allowed_packet: written.
	each := 1 << 20
	n := packet/each + 2
	msgs := make([]core.Message, n)
	for i := range msgs {
		msgs[i] = core.Raw{To: "orders", Type: "big", Key: "g", Data: plPayload(uint64(i), each)}
	}
	envs, err := ob.PublishAll(ctx, db, msgs)
	if err != nil {
		t.Fatalf("PublishAll of %d payloads of %d bytes (%d in all, max_allowed_packet %d): %v", n, each, n*each, packet, err)
	}

	// One payload over max_allowed_packet: the server refuses it; nothing is written.
	huge := plPayload(7, packet+1)
	_, err = ob.Publish(ctx, db, core.Raw{To: "orders", Type: "big", Key: "g", Data: huge})
	if err == nil {
		t.Fatalf("a payload of %d bytes, over max_allowed_packet (%d), was written", len(huge), packet)
	}
	t.Logf("a payload over max_allowed_packet: %v", err)
	if !strings.Contains(err.Error(), "max_allowed_packet") && !strings.Contains(err.Error(), "too large") {
		t.Errorf("the refusal %q does not say what is too large", err)
	}
	if c := counts(t, ob, "orders"); c.Pending != int64(n) {
		t.Errorf("pending %d, want the %d written before", c.Pending, n)
	}
	// The batch under the limit is delivered byte for byte.
	if _, err := ob.Drain(ctx, "orders"); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	for i, e := range envs {
		got, ok := sink.digest(e.ID)
		if !ok || got != sha256.Sum256(plPayload(uint64(i), each)) {
			t.Errorf("message %d not delivered byte for byte", e.ID)
		}
	}
}

// heapBytes is the heap's live and not yet swept objects.
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func TestChaosBigBatchesBoundedMemory(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		var (
			batch   = dbtest.Pick(20, 100)
			payload = dbtest.Pick(64<<10, 128<<10)
			batches = dbtest.Pick(25, 30) // the backlog, in batches
			// The bound: factor × a batch's bytes over the baseline. A batch is held by the
			// driver's buffers and the scanned rows, and the collector lets the heap reach
			// twice what is live; 10 is generous, and still well under the backlog.
			factor = 10
		)
		total := batch * batches
		batchBytes := batch * payload
		sink := newPLSink()
		ob := setup(t, db, core.Config{MaxPayloadBytes: payload,
			Outboxes: map[string]core.OutboxConfig{"orders": {Relay: sink, BatchSize: batch, PollInterval: 10 * time.Millisecond}}})
		score := dbtest.Score{Scenario: "8 huge payloads", Variant: fmt.Sprintf("backlog %d x %d KiB, batch %d", total, payload>>10, batch), Database: string(db.Dialect)}
		committed := map[int64]string{}
		digests := map[int64][32]byte{}
		defer func() {
			score = dbtest.Tally(score, committed, sink.deliveries())
			dbtest.Record(t, score)
		}()

		// The backlog, published a batch at a time so that the test holds little of it.
		for b := range batches {
			msgs := make([]core.Message, batch)
			sums := make([][32]byte, batch)
			for i := range msgs {
				p := plPayload(uint64(b*batch+i), payload)
				sums[i] = sha256.Sum256(p)
				msgs[i] = core.Raw{To: "orders", Type: "big", Key: fmt.Sprintf("g%d", i%7), Data: p}
			}
			envs := publish(t, ob, db, msgs...)
			for i, e := range envs {
				committed[e.ID] = e.GroupKey
				digests[e.ID] = sums[i]
			}
			score.Published += len(msgs)
		}

		runtime.GC()
		runtime.GC()
		base := heapBytes()
		var peak atomic.Uint64
		peak.Store(base)
		sampled := make(chan struct{})
		stopSampling := make(chan struct{})
		go func() {
			defer close(sampled)
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stopSampling:
					return
				case <-tick.C:
					if h := heapBytes(); h > peak.Load() {
						peak.Store(h)
					}
				}
			}
		}()
		began := time.Now()
		stop := run(t, ob)
		eventually(t, 5*time.Minute, "the backlog to drain", func() bool { return counts(t, ob, "orders").Pending == 0 })
		took := time.Since(began)
		stop()
		close(stopSampling)
		<-sampled

		for id, want := range digests {
			if got, ok := sink.digest(id); !ok || got != want {
				t.Errorf("message %d not delivered byte for byte", id)
			}
		}
		grew := int64(peak.Load()) - int64(base)
		bound := int64(factor * batchBytes)
		backlog := int64(total * payload)
		t.Logf("%s: backlog %d messages, %.1f MiB; batch %d, %.1f MiB; heap baseline %.1f MiB, peak %.1f MiB (+%.1f MiB, %.1f batches); bound +%.1f MiB; drained in %v",
			db.Dialect, total, mib(backlog), batch, mib(int64(batchBytes)), mib(int64(base)), mib(int64(peak.Load())), mib(grew), float64(grew)/float64(batchBytes), mib(bound), took.Round(time.Millisecond))
		if grew > bound {
			t.Errorf("the heap grew by %.1f MiB while draining, over %d batches' bytes (%.1f MiB): relay memory is not bounded by the batch", mib(grew), factor, mib(bound))
		}
		if sent := sink.sent.Load(); sent < backlog {
			t.Errorf("the relay was handed %d payload bytes, want at least the backlog's %d", sent, backlog)
		}
		score.Notes = fmt.Sprintf("backlog %.0f MiB; heap peak +%.1f MiB over baseline = %.1f batches of %.1f MiB (bound %d); drained in %v",
			mib(backlog), mib(grew), float64(grew)/float64(batchBytes), mib(int64(batchBytes)), factor, took.Round(time.Millisecond))
	})
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
