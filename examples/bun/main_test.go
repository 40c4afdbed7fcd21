package main

import (
	"bytes"
	"context"
	"testing"
	"time"
)

func TestExample(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out); err != nil {
		t.Fatal(err)
	}
	want := `order 1: committed
order 2: rolled back: payment declined
order 3: no gift wrap (out of gift paper)
order 3: committed
relaying 3 events:
  delivered main.OrderPlaced order:1 {"order_id":1}
  delivered main.GiftWrapped order:1 {"order_id":1}
  delivered main.OrderPlaced order:3 {"order_id":3}
all delivered
`
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}
