package main

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestCloudEventsExample runs the program against its in-process Kafka cluster and
// checks the CloudEvents headers a consumer reads: the attributes of each order's event,
// its id the message key of its row.
func TestCloudEventsExample(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out); err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	want := `record key order:1 value {"order_id":1,"total":25.5}
  ce_specversion: 1.0
  ce_id: 8b5cdb5e-b309-52f7-aa89-d2ecb6a9dc1a
  ce_source: https://shop.example.com/orders
  ce_type: com.example.shop.OrderPlaced
  ce_subject: order:1
  ce_time: <created at, RFC 3339>
  ce_partitionkey: order:1
  content-type: application/json
record key order:2 value {"order_id":2,"total":99}
  ce_specversion: 1.0
  ce_id: 3a495ad0-55d6-5e5e-b03d-725b9183c31a
  ce_source: https://shop.example.com/orders
  ce_type: com.example.shop.OrderPlaced
  ce_subject: order:2
  ce_time: <created at, RFC 3339>
  ce_partitionkey: order:2
  content-type: application/json
`
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}
