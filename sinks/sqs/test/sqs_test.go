package sqs_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	outboxsqs "github.com/outboxer-go/outboxer/sinks/sqs"
	"github.com/outboxer-go/outboxer/sinktest"
)

func newRelay(t testing.TB, cfg outboxsqs.Config) *outboxsqs.Relay {
	t.Helper()
	r, err := outboxsqs.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}

func TestConformance(t *testing.T) {
	needEmulator(t)
	sinktest.Run(t, sinktest.Harness{
		New: func(t *testing.T) *sinktest.Target {
			queue := newQueue(t, true)
			p := newProxy(t)
			// The relay's client talks to the emulator through the proxy (the client's
			// endpoint decides where requests go; the queue URL only names the queue).
			relay := newRelay(t, outboxsqs.Config{Client: newClient("http://" + p.addr), QueueURL: queue, Table: "outboxer_messages"})
			rd := newReader(t, queue)
			return &sinktest.Target{
				Relay:    relay,
				Read:     rd.Read,
				FailNext: func(n int) { p.failing.Add(int64(n)) },
				Stop:     p.stop,
				Start:    func() { p.start(t) },
			}
		},
		BatchLimit:      outboxsqs.MaxBatchEntries,
		MaxMessageBytes: outboxsqs.DefaultMaxMessageBytes,
		Parallel:        true,
	})
}

// TestPoison runs the sinktest Poison case on a FIFO queue whose MaximumMessageSize is
// 1 KiB: the emulator refuses the larger poison entry (SenderFault), and the relay
// reports that as permanent.
func TestPoison(t *testing.T) {
	needEmulator(t)
	sinktest.RunPoison(t, sinktest.Harness{
		New: func(t *testing.T) *sinktest.Target {
			queue := newQueueWith(t, true, map[string]string{"MaximumMessageSize": "1024"})
			relay := newRelay(t, outboxsqs.Config{Client: newClient(endpoint), QueueURL: queue, Table: "outboxer_messages"})
			return &sinktest.Target{Relay: relay, Read: newReader(t, queue).Read}
		},
		DB: func(t *testing.T) *sql.DB { return dbtest.Postgres(t).DB },
		Poisons: []sinktest.Poison{{
			Name:      "over-queue-limit",
			Payload:   []byte(`{"pad":"` + strings.Repeat("x", 2000) + `"}`),
			Permanent: true,
			Reason:    "Message must be shorter than 1024 bytes",
			By:        "broker: the queue's MaximumMessageSize (1 KiB) refuses the entry as the sender's fault",
		}},
		PoisonScore: func(t *testing.T, r sinktest.PoisonResult) {
			dbtest.Record(t, dbtest.Score{
				Scenario: "7 poison message", Variant: r.Poison.Name + " " + r.Variant, Database: "sqs",
				Published: r.Published, Committed: r.Committed, Delivered: r.Delivered, Lost: r.Lost,
				Reordered: r.Reordered, Duplicated: r.Duplicated, Recover: r.Recover,
				Notes: r.Poison.By + "; " + r.Outcome,
			})
		},
	})
}

func TestNewValidates(t *testing.T) {
	client := newClient("http://127.0.0.1:1")
	fifo := "http://127.0.0.1:1/000000000000/q.fifo"
	std := "http://127.0.0.1:1/000000000000/q"
	for _, tc := range []struct {
		name  string
		cfg   outboxsqs.Config
		field string
	}{
		{"no client", outboxsqs.Config{QueueURL: fifo}, "Config.Client"},
		{"no queue", outboxsqs.Config{Client: client}, "Config.QueueURL"},
		{"not a URL", outboxsqs.Config{Client: client, QueueURL: "orders.fifo"}, "Config.QueueURL"},
		{"standard queue, ordered outbox", outboxsqs.Config{Client: client, QueueURL: std}, "Config.QueueURL"},
		{"standard queue, total order", outboxsqs.Config{Client: client, QueueURL: std, Ordering: core.OrderTotal}, "Config.QueueURL"},
		{"bad ordering", outboxsqs.Config{Client: client, QueueURL: fifo, Ordering: 9}, "Config.Ordering"},
		{"size too small", outboxsqs.Config{Client: client, QueueURL: fifo, MaxMessageBytes: 10}, "Config.MaxMessageBytes"},
		{"size too large", outboxsqs.Config{Client: client, QueueURL: fifo, MaxMessageBytes: 2 << 20}, "Config.MaxMessageBytes"},
		{"bad table", outboxsqs.Config{Client: client, QueueURL: fifo, Table: "a b"}, "Config.Table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := outboxsqs.New(tc.cfg)
			if err == nil {
				t.Fatal("New accepted an invalid Config")
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name %s", err, tc.field)
			}
		})
	}
}

// A standard queue is accepted for an unordered outbox silently, and for an ordered one
// only with AllowUnordered, with a warning.
func TestStandardQueue(t *testing.T) {
	needEmulator(t)
	queue := newQueue(t, false)
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	newRelay(t, outboxsqs.Config{Client: newClient(endpoint), QueueURL: queue, Ordering: core.OrderNone, Logger: logger})
	if logs.Len() != 0 {
		t.Errorf("warned for an unordered outbox: %s", logs.String())
	}
	relay := newRelay(t, outboxsqs.Config{Client: newClient(endpoint), QueueURL: queue, AllowUnordered: true, Logger: logger})
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "out of order") {
		t.Errorf("no warning for a standard queue with an ordered outbox: %q", logs.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rd := newReader(t, queue)
	envs := sinktest.Envelopes(25, 3)
	if err := relay.Deliver(ctx, envs); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	got, err := rd.Read(ctx, len(envs))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for _, m := range got {
		seen[m.ID] = true
	}
	if len(seen) != len(envs) {
		t.Errorf("%d distinct messages arrived, want %d", len(seen), len(envs))
	}
}

// A batch delivered again (after a crash) is dropped by the FIFO queue's deduplication,
// and the MessageGroupId follows the outbox's ordering.
func TestFIFODeduplicationAndGroups(t *testing.T) {
	needEmulator(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	queue := newQueue(t, true)
	relay := newRelay(t, outboxsqs.Config{Client: newClient(endpoint), QueueURL: queue, Table: "outboxer_messages", Ordering: core.OrderTotal})
	envs := sinktest.Envelopes(12, 3)
	for range 2 {
		if err := relay.Deliver(ctx, envs); err != nil {
			t.Fatalf("Deliver: %v", err)
		}
	}
	client := newClient(endpoint)
	var ids []int64
	groups := map[string]bool{}
	for len(ids) < len(envs) && ctx.Err() == nil {
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &queue, MaxNumberOfMessages: 10,
			WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameMessageGroupId, types.MessageSystemAttributeNameMessageDeduplicationId}})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			rec, err := decode(m)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, rec.ID)
			groups[m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]] = true
			if want := "outboxer_messages:" + strconvI(rec.ID); m.Attributes[string(types.MessageSystemAttributeNameMessageDeduplicationId)] != want {
				t.Errorf("message %d: dedup ID %q, want %q", rec.ID, m.Attributes[string(types.MessageSystemAttributeNameMessageDeduplicationId)], want)
			}
			if _, err := client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &queue, ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Nothing more: the second delivery was deduplicated.
	out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &queue, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 0 || len(ids) != len(envs) {
		t.Errorf("received %d then %d more, want %d once each", len(ids), len(out.Messages), len(envs))
	}
	for i, id := range ids {
		if id != int64(i+1) {
			t.Errorf("total order: position %d holds message %d", i, id)
		}
	}
	if len(groups) != 1 || !groups["outbox:sinktest"] {
		t.Errorf("message groups %v, want only the outbox's", groups)
	}
}

// Headers that cannot each be an attribute travel together as JSON; a message too
// large is refused permanently with a message naming its size.
func TestHeadersPackedAndOversize(t *testing.T) {
	needEmulator(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	queue := newQueue(t, true)
	relay := newRelay(t, outboxsqs.Config{Client: newClient(endpoint), QueueURL: queue, MaxMessageBytes: 4096})
	rd := newReader(t, queue)
	many := map[string]string{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"} {
		many[k] = k + "-value"
	}
	envs := []core.Envelope{
		{ID: 1, Outbox: "o", Type: "t", GroupKey: "k", Payload: []byte("many headers"), Headers: many},
		{ID: 2, Outbox: "o", Type: "t", GroupKey: "k", Payload: bytes.Repeat([]byte("x"), 4000), Headers: map[string]string{"h": strings.Repeat("y", 200)}},
		{ID: 3, Outbox: "o", Type: "t", GroupKey: "k", Payload: []byte("empty value"), Headers: map[string]string{"empty": ""}},
	}
	err := relay.Deliver(ctx, envs)
	var pf *core.PartialFailure
	if !errors.As(err, &pf) || len(pf.Failed) != 1 || !errors.Is(pf.Failed[2], core.ErrPermanent) {
		t.Fatalf("Deliver: %v, want message 2 refused permanently, alone", err)
	}
	if !strings.Contains(pf.Failed[2].Error(), "too large") {
		t.Errorf("error %q does not say the message is too large", pf.Failed[2])
	}
	got, err := rd.Read(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != 1 || got[1].ID != 3 || len(got[0].Headers) != len(many) || got[0].Headers["i"] != "i-value" ||
		got[1].Headers == nil || got[1].Headers["empty"] != "" || len(got[1].Headers) != 1 {
		t.Errorf("got %+v", got)
	}
}

func strconvI(n int64) string { return strconv.FormatInt(n, 10) }
