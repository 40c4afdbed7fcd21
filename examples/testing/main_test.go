package main

import (
	"bytes"
	"context"
	"testing"
)

// TestTestingExample checks the program's account of the scenario that shop_test.go tests.
func TestTestingExample(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	want := `placed orders 1, 2, 3; placing order 1 again failed: true
pending:
  #1 order:1 shop.OrderPlaced attempts 0 last error ""
  #2 order:2 shop.OrderPlaced attempts 0 last error ""
  #3 order:3 shop.OrderPlaced attempts 0 last error ""
drain (broker refuses #2): delivered 2, failed 0, dead 1
dead:
  #2 order:2 shop.OrderPlaced attempts 1 last error "schema rejected"
retried 1 dead
pending:
  #2 order:2 shop.OrderPlaced attempts 0 last error "schema rejected"
drain (broker fixed): delivered 1, failed 0, dead 0
the relay got, in order:
  #1 order:1 shop.OrderPlaced {"order_id":1,"total":10}
  #3 order:3 shop.OrderPlaced {"order_id":3,"total":30}
  #2 order:2 shop.OrderPlaced {"order_id":2,"total":20}
`
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}
