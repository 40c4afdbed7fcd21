package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/dbtest"
)

// TestRiverExample runs the example in a fresh schema (the DSN's search_path). Without
// PostgreSQL it is skipped, unless CI is set: then it fails.
func TestRiverExample(t *testing.T) {
	db := dbtest.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, db.DSN, &out); err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	want := `job orders.OrderPlaced order:1: total 25.50
job orders.OrderPlaced order:2: total 99.00
job orders.OrderPlaced order:3: total 12.75
`
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
	var jobs, pending int
	if err := db.QueryRow(`SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&jobs); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT count(*) FROM outboxer_messages`).Scan(&pending); err != nil {
		t.Fatal(err)
	}
	if jobs != 3 || pending != 0 {
		t.Errorf("%d completed job(s) and %d outbox row(s) left, want 3 and 0", jobs, pending)
	}
}
