package main

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestInboxExample runs the program: the second billing instance receives the records
// the first handled without committing, and every order is invoiced exactly once.
func TestInboxExample(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out); err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	want := `billing-1: invoiced 5 orders, died before committing its offsets
billing-2: received all 7 records: 2 claimed and invoiced, 5 duplicates skipped
order 1: 1 invoice(s)
order 2: 1 invoice(s)
order 3: 1 invoice(s)
order 4: 1 invoice(s)
order 5: 1 invoice(s)
order 6: 1 invoice(s)
order 7: 1 invoice(s)
`
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}
