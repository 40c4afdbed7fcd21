package riversink_test

import (
	"context"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/outboxer-go/outboxer/core"
	riversink "github.com/outboxer-go/outboxer/sinks/river"
)

type bareArgs struct {
	N int64 `json:"n"`
}

func (bareArgs) Kind() string { return "bare" }

// TestHeadersReachTheJobMetadata: the envelope's headers (a trace context among them)
// are in the job's metadata even when Options.Job builds args without them.
func TestHeadersReachTheJobMetadata(t *testing.T) {
	db := newRiverDB(t)
	client, err := river.NewClient(riverpgxv5.New(db.pool), &river.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := riversink.New(client, riversink.Options{
		Job: func(env core.Envelope) (river.JobArgs, *river.InsertOpts, error) {
			return bareArgs{N: env.ID}, nil, nil
		},
		InsertOpts: river.InsertOpts{Metadata: []byte(`{"team":"shop"}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	batch := []core.Envelope{
		{ID: 1, Outbox: "orders", Type: "t", Payload: []byte(`{}`), Headers: map[string]string{"traceparent": tp, "tracestate": "k=v"}},
		{ID: 2, Outbox: "orders", Type: "t", Payload: []byte(`{}`)},
	}
	if err := sink.Deliver(context.Background(), batch); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	rows, err := db.Query(`SELECT (metadata->>'outboxer_id')::bigint, coalesce(metadata->'outboxer_headers'->>'traceparent', ''),
		coalesce(metadata->'outboxer_headers'->>'tracestate', ''), metadata ? 'outboxer_headers', metadata->>'team' FROM river_job ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id int64
		var gotTP, gotTS, team string
		var has bool
		if err := rows.Scan(&id, &gotTP, &gotTS, &has, &team); err != nil {
			t.Fatal(err)
		}
		n++
		switch {
		case team != "shop":
			t.Errorf("job of message %d lost the insert options' metadata: team = %q", id, team)
		case id == 1 && (gotTP != tp || gotTS != "k=v"):
			t.Errorf("job of message 1: traceparent %q, tracestate %q; want %q, k=v", gotTP, gotTS, tp)
		case id == 2 && has:
			t.Errorf("job of message 2, which has no headers, has %s", riversink.MetadataHeaders)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("%d jobs, want 2", n)
	}
}
