package main

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestTwoNodes runs the web node and the relay node on one database file and checks that
// the relay node delivers the events of accepted orders, each once and only those, and
// that nothing is left behind.
func TestTwoNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out); err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	want := `web node:   POST /orders {"order_id":1,"total":25.5} -> 201 order 1 accepted, event #1
relay node: delivered #1 order:1 {"order_id":1,"total":25.5}
web node:   POST /orders {"order_id":1,"total":25.5} -> 409 order exists
web node:   POST /orders {"order_id":2,"total":-3} -> 400 invalid order
web node:   POST /orders {"order_id":2,"total":99} -> 201 order 2 accepted, event #2
relay node: delivered #2 order:2 {"order_id":2,"total":99}
outbox: 0 pending, 0 dead
`
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}
