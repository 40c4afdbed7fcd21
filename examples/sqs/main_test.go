package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/dbtest"
)

// TestSQSExample starts the SQS emulator the project's tests use (installed by `npm ci`
// at the repository root) on a free loopback port, runs the program against it and checks
// what it received: each event once, order 1's two events in sequence.
func TestSQSExample(t *testing.T) {
	endpoint := dbtest.SQSEmulator(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out, endpoint); err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	want := `delivered 3, failed 0, dead 0
id 1 group order:1 type orders.OrderPlaced body {"order_id":1,"total":25.5}
id 2 group order:1 type orders.OrderPlaced body {"order_id":1,"total":30}
id 3 group order:2 type orders.OrderPlaced body {"order_id":2,"total":12.75}
`
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}
