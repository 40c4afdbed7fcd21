package main

import (
	"bytes"
	"context"
	"testing"
	"time"
)

func TestWatermillExample(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out); err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	want := `order 1: committed
order 2: rolled back (payment declined)
order 3: committed
received orders.OrderPlaced order:1 {"order_id":1,"total":25.5}
received orders.OrderPlaced order:3 {"order_id":3,"total":12.75}
pending 0, dead 0
`
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}
