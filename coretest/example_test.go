package coretest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/coretest"
)

// A Recorder that fails message 2 once, as a broker might.
func ExampleRecorder() {
	rec := &coretest.Recorder{Fail: coretest.FailIDs(errors.New("broker busy"), 2)}
	batch := []core.Envelope{{ID: 1}, {ID: 2}, {ID: 3}}
	fmt.Println(rec.Deliver(context.Background(), batch))
	for _, e := range rec.Delivered() {
		fmt.Println("delivered", e.ID)
	}
	// Output:
	// outboxer: 1 message(s) not delivered: 2 (broker busy)
	// delivered 1
	// delivered 3
}
