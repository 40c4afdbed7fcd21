package main

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestKafkaExample runs the program against its in-process Kafka cluster and checks what
// a consumer reads from the topic: each order's event under its key, with the outbox's ID
// and type in the headers, in the partition its key hashes to.
func TestKafkaExample(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out); err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	want := `partition 0 offset 0 key order:1 id 1 type orders.OrderPlaced value {"order_id":1,"total":25.5}
partition 1 offset 0 key order:2 id 2 type orders.OrderPlaced value {"order_id":2,"total":99}
partition 2 offset 0 key order:3 id 3 type orders.OrderPlaced value {"order_id":3,"total":12.75}
`
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}
