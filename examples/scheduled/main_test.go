package main

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestScheduledExample checks that each message arrives once, in the order of the times
// they were due, and none before its time.
func TestScheduledExample(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out); err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	want := `published #1 main.OrderConfirmed, due +0s
published #2 main.PaymentReminder, due +400ms
published #3 main.DailyReport, due +200ms
delivered #1 main.OrderConfirmed {"order_id":1}: on time
delivered #3 main.DailyReport {"day":"2025-01-31"}: on time
delivered #2 main.PaymentReminder {"order_id":1}: on time
pending 0
`
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}
