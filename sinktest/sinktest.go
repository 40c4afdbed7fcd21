package sinktest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
)

// Harness connects the suite to one sink. Only New is required; every other field is
// an optional ability, and the cases needing one are skipped, saying which, without it.
type Harness struct {
	// New returns a relay writing to a destination of its own (a fresh topic, queue or
	// subject), with a way to read that destination back. It is called once per case;
	// cases run in parallel when Parallel is set. Clean up with t.Cleanup.
	New func(t *testing.T) *Target

	// BatchLimit is the most messages the broker takes in one call (10 for SQS
	// SendMessageBatch). The "BatchOverLimit" case hands the relay a batch of
	// 3*BatchLimit+3 in one Deliver. 0: the broker has no such limit; the case is skipped.
	BatchLimit int

	// MaxMessageBytes is the largest payload the relay accepts. The "Oversize" case hands
	// it a payload of MaxMessageBytes+1 bytes and expects it refused with an error
	// matching core.ErrPermanent, while the rest of the batch is delivered.
	// 0: skipped.
	MaxMessageBytes int

	// DB, optional, returns a fresh database (PostgreSQL, MariaDB or SQLite, with its
	// driver registered) for the cases that run the real engine: "Poison".
	DB func(t *testing.T) *sql.DB

	// Poisons, optional, are messages the destination refuses for good; the "Poison"
	// case runs each through the engine, with MaxAttempts 3 and 0. Needs DB.
	Poisons []Poison

	// PoisonScore, optional, receives what each run of the "Poison" case saw, once the
	// run is over (t.Failed then says whether it passed).
	PoisonScore func(t *testing.T, r PoisonResult)

	// Parallel runs the cases in parallel with each other.
	Parallel bool

	// Timeout bounds each case. Default 60 s.
	Timeout time.Duration
}

// Target is one fresh destination and the relay delivering to it.
type Target struct {
	// Relay under test. Required.
	Relay core.Relay

	// Read waits until at least n messages have arrived at the destination since the
	// Target was created, or ctx is done, and returns every message received so far, in
	// the order the destination gives them (for a destination with several partitions
	// or shards, in each one's order). It is cumulative: each call returns everything
	// read since the start, so a message delivered twice appears twice.
	// It returns ctx's error if fewer than n arrived. Required.
	Read func(ctx context.Context, n int) ([]Received, error)

	// FailNext, optional, makes the broker refuse the next n sends with a transient
	// error that the relay reports (it must not be hidden by retries inside the client).
	// A send is one request carrying part of a batch when the relay splits batches (a
	// SendMessageBatch call, a produce request to one of several brokers), so that a
	// refused send leaves the rest of the batch delivered: the "PartialFailure" case
	// expects a *core.PartialFailure naming some but not all of the batch.
	// Cases "PartialFailure", "RetryAfterTransientError" and "OrderUnderFailures" need it.
	FailNext func(n int)

	// Stop and Start, optional (both or neither), take the broker down (unreachable: it
	// refuses connections or drops them) and bring it back with what it had stored.
	// Case "BrokerDownAtStart" needs them: it stops the broker before the relay's first
	// delivery, expects Deliver to fail within its context's deadline, starts the
	// broker and expects everything delivered in order.
	Stop, Start func()
}

// Received is a message as read back from the destination, decoded by the harness
// into the envelope fields the sink carries.
type Received struct {
	ID       int64
	Outbox   string
	Type     string
	GroupKey string
	Payload  []byte
	// Headers are the envelope's headers only, without the ones the sink adds itself.
	// An empty set may be nil.
	Headers map[string]string
}

// Run runs the conformance suite against the sink h describes, as subtests of t:
//
//   - Order: 3,000 messages in 25 groups plus unordered ones, driven through Drive in
//     batches of 100, arrive complete, each group in ID order, none twice.
//   - RoundTrip: ID, outbox, type, group key, a binary payload (every byte value) and
//     unicode headers arrive unchanged.
//   - PartialFailure: with one send refused, Deliver returns a *core.PartialFailure
//     naming some but not all of the batch; every message it does not name arrived; a
//     named message that arrived anyway is allowed only after a named one of its group
//     (the relay withheld credit for it); driving on delivers the rest in order.
//   - RetryAfterTransientError: with the next sends refused, driving on delivers all.
//   - OrderUnderFailures: the Order case with a refused send before every third call;
//     duplicates are allowed (at-least-once), the first arrivals must be in order.
//   - BatchOverLimit: one Deliver of 3*BatchLimit+3 messages returns nil; all arrive.
//   - Oversize: a payload over MaxMessageBytes is refused with core.ErrPermanent (in a
//     *core.PartialFailure naming it); the other messages, including later ones of its
//     group, are delivered.
//   - BrokerDownAtStart: see Target.Stop.
//   - Poison: for each of Harness.Poisons, the real engine on Harness.DB delivers four
//     groups of eight messages, one of them the poison, through the relay. With
//     MaxAttempts 3 the poison is tried at most 3 times (once if the sink says it is
//     permanent) and goes dead with a last error giving the reason, and everything else
//     arrives, each group in order. With MaxAttempts 0 a poison the sink does not call
//     permanent blocks its group while the other groups arrive, until Discard frees it
//     and the rest of its group arrives in order.
//
// Every message sent has a fresh destination, so IDs start at 1 in each case.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("sinktest: Harness.New is required")
	}
	timeout := h.Timeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	cases := []struct {
		name string
		fn   func(t *testing.T, ctx context.Context, h Harness)
	}{
		{"Order", testOrder},
		{"RoundTrip", testRoundTrip},
		{"PartialFailure", testPartialFailure},
		{"RetryAfterTransientError", testRetry},
		{"OrderUnderFailures", testOrderUnderFailures},
		{"BatchOverLimit", testBatchOverLimit},
		{"Oversize", testOversize},
		{"BrokerDownAtStart", testBrokerDown},
		{"Poison", testPoison},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if h.Parallel {
				t.Parallel()
			}
			ctx, cancel := context.WithTimeout(t.Context(), timeout)
			defer cancel()
			c.fn(t, ctx, h)
		})
	}
}

func newTarget(t *testing.T, h Harness) *Target {
	t.Helper()
	tg := h.New(t)
	if tg == nil || tg.Relay == nil || tg.Read == nil {
		t.Fatal("sinktest: Harness.New must return a Target with Relay and Read")
	}
	if (tg.Stop == nil) != (tg.Start == nil) {
		t.Fatal("sinktest: Target.Stop and Target.Start go together")
	}
	return tg
}

// Envelopes returns n envelopes with IDs 1..n for outbox "sinktest": message i belongs
// to group "g<i mod groups>", except every seventh, which is unordered (no group key).
// Payloads and headers identify the message, so a harness can check them.
func Envelopes(n, groups int) []core.Envelope {
	envs := make([]core.Envelope, n)
	now := time.Now()
	for i := range envs {
		id := int64(i + 1)
		key := fmt.Sprintf("g%d", i%max(groups, 1))
		if id%7 == 0 {
			key = ""
		}
		envs[i] = core.Envelope{
			ID:          id,
			Outbox:      "sinktest",
			Type:        "sinktest.Event",
			GroupKey:    key,
			Payload:     fmt.Appendf(nil, `{"n":%d}`, id),
			Headers:     map[string]string{"seq": fmt.Sprint(id)},
			State:       core.Pending,
			CreatedAt:   now,
			AvailableAt: now,
		}
	}
	return envs
}

func read(t *testing.T, ctx context.Context, tg *Target, n int) []Received {
	t.Helper()
	got, err := tg.Read(ctx, n)
	if err != nil {
		t.Fatalf("reading %d message(s) back: %v (got %d)", n, err, len(got))
	}
	return got
}

// checkArrived fails t unless every envelope arrived, each group's first arrivals are
// in ID order and, when exactlyOnce, nothing arrived twice or unexpectedly.
func checkArrived(t *testing.T, envs []core.Envelope, got []Received, exactlyOnce bool) {
	t.Helper()
	want := map[int64]core.Envelope{}
	for _, e := range envs {
		want[e.ID] = e
	}
	seen := map[int64]int{}
	last := map[string]int64{}
	for _, r := range got {
		e, ok := want[r.ID]
		if !ok {
			t.Errorf("message %d arrived but was never sent", r.ID)
			continue
		}
		seen[r.ID]++
		if seen[r.ID] > 1 {
			if exactlyOnce {
				t.Errorf("message %d arrived %d times", r.ID, seen[r.ID])
			}
			continue
		}
		if r.GroupKey != e.GroupKey {
			t.Errorf("message %d arrived with group key %q, want %q", r.ID, r.GroupKey, e.GroupKey)
		}
		if e.GroupKey == "" {
			continue
		}
		if prev := last[e.GroupKey]; prev > r.ID {
			t.Errorf("group %q: message %d arrived after message %d", e.GroupKey, r.ID, prev)
		}
		last[e.GroupKey] = r.ID
	}
	missing := 0
	for _, e := range envs {
		if seen[e.ID] == 0 {
			if missing < 5 {
				t.Errorf("message %d never arrived", e.ID)
			}
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d message(s) never arrived", missing, len(envs))
	}
}

func drive(t *testing.T, ctx context.Context, r core.Relay, envs []core.Envelope, opts DriveOptions) DriveResult {
	t.Helper()
	res, err := Drive(ctx, r, envs, opts)
	if err != nil {
		t.Fatalf("driving %d message(s): %v", len(envs), err)
	}
	return res
}

func testOrder(t *testing.T, ctx context.Context, h Harness) {
	tg := newTarget(t, h)
	envs := Envelopes(3000, 25)
	res := drive(t, ctx, tg.Relay, envs, DriveOptions{BatchSize: 100})
	if len(res.Dead) > 0 {
		t.Fatalf("%d message(s) refused permanently: %v", len(res.Dead), res.Dead)
	}
	if res.Failures > 0 {
		t.Errorf("%d of %d call(s) failed with no failure injected", res.Failures, res.Calls)
	}
	checkArrived(t, envs, read(t, ctx, tg, len(envs)), true)
}

func testRoundTrip(t *testing.T, ctx context.Context, h Harness) {
	tg := newTarget(t, h)
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	mixed := bytes.Repeat([]byte{0, 0xff, '\n', 0x80}, 1024)
	if h.MaxMessageBytes > 0 {
		mixed = mixed[:min(len(mixed), h.MaxMessageBytes)]
	}
	envs := []core.Envelope{
		{ID: 1, Outbox: "orders", Type: "orders.Created", GroupKey: "order:42", Payload: []byte(`{"id":42,"total":"12.50"}`),
			Headers: map[string]string{"trace-id": "4bf92f3577b34da6a3ce929d0e0e4736", "tenant": "acme"}},
		{ID: 2, Outbox: "orders", Type: "orders.Blob", GroupKey: "order:42", Payload: binary,
			Headers: map[string]string{"clé": "valeur ✓", "emoji": "📦🚚", "ключ": "значение"}},
		{ID: 3, Outbox: "orders", Type: "orders.Note", Payload: []byte("plain text, no group, no headers ✓")},
		{ID: 4, Outbox: "orders", Type: "orders.Bytes", GroupKey: "order:43", Payload: mixed},
	}
	if err := tg.Relay.Deliver(ctx, envs); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	got := read(t, ctx, tg, len(envs))
	checkArrived(t, envs, got, true)
	byID := map[int64]Received{}
	for _, r := range got {
		byID[r.ID] = r
	}
	for _, e := range envs {
		r, ok := byID[e.ID]
		if !ok {
			continue
		}
		if r.Outbox != e.Outbox || r.Type != e.Type || r.GroupKey != e.GroupKey {
			t.Errorf("message %d arrived as outbox %q type %q group %q, want %q %q %q",
				e.ID, r.Outbox, r.Type, r.GroupKey, e.Outbox, e.Type, e.GroupKey)
		}
		if !bytes.Equal(r.Payload, e.Payload) {
			t.Errorf("message %d: payload differs: got %d byte(s) %q…, want %d byte(s) %q…",
				e.ID, len(r.Payload), head(r.Payload), len(e.Payload), head(e.Payload))
		}
		if len(r.Headers) != len(e.Headers) || !maps.Equal(r.Headers, e.Headers) {
			t.Errorf("message %d: headers %v, want %v", e.ID, r.Headers, e.Headers)
		}
	}
}

func head(b []byte) []byte { return b[:min(len(b), 16)] }

func needFail(t *testing.T, tg *Target) {
	t.Helper()
	if tg.FailNext == nil {
		t.Skip("the harness cannot inject broker failures (Target.FailNext is nil)")
	}
}

func testPartialFailure(t *testing.T, ctx context.Context, h Harness) {
	tg := newTarget(t, h)
	needFail(t, tg)
	n := max(200, 3*h.BatchLimit+3)
	envs := Envelopes(n, 30)
	tg.FailNext(1)
	err := tg.Relay.Deliver(ctx, envs)
	var pf *core.PartialFailure
	switch {
	case err == nil:
		t.Fatal("Deliver returned nil although a send was refused")
	case !errors.As(err, &pf):
		t.Fatalf("Deliver returned %T %v, want a *core.PartialFailure naming part of the batch", err, err)
	case len(pf.Failed) == 0 || len(pf.Failed) >= len(envs):
		t.Fatalf("partial failure names %d of %d message(s), want some but not all", len(pf.Failed), len(envs))
	}
	inBatch := map[int64]bool{}
	for _, e := range envs {
		inBatch[e.ID] = true
	}
	for id, e := range pf.Failed {
		if !inBatch[id] {
			t.Errorf("partial failure names message %d, not in the batch", id)
		}
		if e == nil {
			t.Errorf("partial failure names message %d without an error", id)
		}
		if errors.Is(e, core.ErrPermanent) {
			t.Errorf("message %d failed permanently on a transient broker error: %v", id, e)
		}
	}
	delivered := len(envs) - len(pf.Failed)
	got := read(t, ctx, tg, delivered)
	arrived := map[int64]bool{}
	for _, r := range got {
		arrived[r.ID] = true
	}
	groupFailed := map[string]bool{}
	for _, e := range envs {
		_, named := pf.Failed[e.ID]
		switch {
		case !named && !arrived[e.ID]:
			t.Errorf("message %d not named as failed but never arrived", e.ID)
		case named && arrived[e.ID] && (e.GroupKey == "" || !groupFailed[e.GroupKey]):
			t.Errorf("message %d arrived but was named as failed, with no failed message before it in its group", e.ID)
		}
		if named && e.GroupKey != "" {
			groupFailed[e.GroupKey] = true
		}
	}
	// Hand the rest again, as the engine does, and check that order survived.
	pending, _ := Outcome(envs, err)
	var rest []core.Envelope
	for _, e := range envs {
		if pending[e.ID] {
			rest = append(rest, e)
		}
	}
	drive(t, ctx, tg.Relay, rest, DriveOptions{BatchSize: n})
	checkArrived(t, envs, read(t, ctx, tg, len(envs)), false)
}

func testRetry(t *testing.T, ctx context.Context, h Harness) {
	tg := newTarget(t, h)
	needFail(t, tg)
	envs := Envelopes(50, 5)
	tg.FailNext(2)
	res := drive(t, ctx, tg.Relay, envs, DriveOptions{BatchSize: 10})
	if len(res.Dead) > 0 {
		t.Fatalf("transient failures made %d message(s) dead: %v", len(res.Dead), res.Dead)
	}
	checkArrived(t, envs, read(t, ctx, tg, len(envs)), false)
}

func testOrderUnderFailures(t *testing.T, ctx context.Context, h Harness) {
	tg := newTarget(t, h)
	needFail(t, tg)
	envs := Envelopes(2000, 20)
	res := drive(t, ctx, tg.Relay, envs, DriveOptions{
		BatchSize: 100,
		BeforeDeliver: func(call int) {
			if call%3 == 0 {
				tg.FailNext(1)
			}
		},
	})
	if len(res.Dead) > 0 {
		t.Fatalf("transient failures made %d message(s) dead: %v", len(res.Dead), res.Dead)
	}
	if res.Failures == 0 {
		t.Errorf("no call failed in %d call(s) although failures were injected", res.Calls)
	}
	checkArrived(t, envs, read(t, ctx, tg, len(envs)), false)
}

func testBatchOverLimit(t *testing.T, ctx context.Context, h Harness) {
	if h.BatchLimit <= 0 {
		t.Skip("the broker has no batch limit (Harness.BatchLimit is 0)")
	}
	tg := newTarget(t, h)
	envs := Envelopes(3*h.BatchLimit+3, 4)
	if err := tg.Relay.Deliver(ctx, envs); err != nil {
		t.Fatalf("Deliver of %d message(s), over the broker's limit of %d: %v", len(envs), h.BatchLimit, err)
	}
	checkArrived(t, envs, read(t, ctx, tg, len(envs)), true)
}

func testOversize(t *testing.T, ctx context.Context, h Harness) {
	if h.MaxMessageBytes <= 0 {
		t.Skip("the harness names no message size limit (Harness.MaxMessageBytes is 0)")
	}
	tg := newTarget(t, h)
	envs := Envelopes(6, 2) // groups g0 and g1; ID 3 is in g0 (IDs 1, 3, 5)
	big := envs[2]
	big.Payload = bytes.Repeat([]byte("x"), h.MaxMessageBytes+1)
	envs[2] = big
	err := tg.Relay.Deliver(ctx, envs)
	var pf *core.PartialFailure
	if !errors.As(err, &pf) {
		t.Fatalf("Deliver with a %d-byte payload returned %v, want a *core.PartialFailure naming message %d", len(big.Payload), err, big.ID)
	}
	if e, ok := pf.Failed[big.ID]; !ok || !errors.Is(e, core.ErrPermanent) {
		t.Fatalf("message %d (%d bytes, limit %d): error %v, want one matching core.ErrPermanent", big.ID, len(big.Payload), h.MaxMessageBytes, e)
	}
	if msg := pf.Failed[big.ID].Error(); !strings.Contains(msg, fmt.Sprint(big.ID)) && !strings.Contains(msg, "size") && !strings.Contains(msg, "large") && !strings.Contains(msg, "byte") {
		t.Errorf("the error %q does not say what is wrong (size) with the message", msg)
	}
	for id, e := range pf.Failed {
		if id != big.ID && errors.Is(e, core.ErrPermanent) {
			t.Errorf("message %d refused permanently with the oversize one: %v", id, e)
		}
	}
	// The engine marks the oversize message dead and hands the rest again.
	pending, dead := Outcome(envs, err)
	if _, ok := dead[big.ID]; !ok || len(dead) != 1 {
		t.Fatalf("dead: %v, want only message %d", dead, big.ID)
	}
	var rest []core.Envelope
	for _, e := range envs {
		if pending[e.ID] {
			rest = append(rest, e)
		}
	}
	res := drive(t, ctx, tg.Relay, rest, DriveOptions{})
	if len(res.Dead) > 0 {
		t.Errorf("messages refused after the oversize one was dropped: %v", res.Dead)
	}
	var want []core.Envelope
	for _, e := range envs {
		if e.ID != big.ID {
			want = append(want, e)
		}
	}
	got := read(t, ctx, tg, len(want))
	for _, r := range got {
		if r.ID == big.ID {
			t.Errorf("the oversize message %d arrived (%d bytes)", r.ID, len(r.Payload))
		}
	}
	checkArrived(t, want, got, false)
}

func testBrokerDown(t *testing.T, ctx context.Context, h Harness) {
	tg := newTarget(t, h)
	if tg.Stop == nil {
		t.Skip("the harness cannot stop the broker (Target.Stop is nil)")
	}
	envs := Envelopes(40, 4)
	tg.Stop()
	const deadline = 2 * time.Second
	dctx, cancel := context.WithTimeout(ctx, deadline)
	start := time.Now()
	err := tg.Relay.Deliver(dctx, envs)
	took := time.Since(start)
	cancel()
	if err == nil {
		t.Fatal("Deliver returned nil with the broker down")
	}
	if took > deadline+5*time.Second {
		t.Errorf("Deliver took %v with a deadline of %v", took, deadline)
	}
	pending, dead := Outcome(envs, err)
	if len(dead) > 0 {
		t.Fatalf("a broker that is down made %d message(s) dead: %v", len(dead), dead)
	}
	tg.Start()
	var rest []core.Envelope
	for _, e := range envs {
		if pending[e.ID] {
			rest = append(rest, e)
		}
	}
	res := drive(t, ctx, tg.Relay, rest, DriveOptions{BatchSize: 10})
	if len(res.Dead) > 0 {
		t.Fatalf("%d message(s) dead after the broker came back: %v", len(res.Dead), res.Dead)
	}
	checkArrived(t, envs, read(t, ctx, tg, len(envs)), false)
}
