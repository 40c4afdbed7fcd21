package main

import (
	"bytes"
	"context"
	"testing"
)

func TestQuickstart(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	want := `order 1: committed
order 2: rolled back (payment declined)
order 3: committed
before relaying: 2 pending
  delivered #1 main.OrderPlaced order:1 {"order_id":1,"total":25.5}
  delivered #2 main.OrderPlaced order:3 {"order_id":3,"total":12.75}
after relaying: 0 pending, 0 dead
`
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}
