package core_test

import (
	"context"
	"errors"
	"log"

	"github.com/outboxer-go/outboxer/core"
)

// Run blocks until ctx is done. It waits for a database that is not up yet or tables not
// migrated yet, logging an Error line per try; an error it returns means the relay did
// not run, and says why.
func ExampleOutboxer_Run() {
	var ob *core.Outboxer // from core.New
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	done := make(chan error, 1)
	go func() { done <- ob.Run(ctx) }()

	// ... serve until shutdown, then:
	stop()
	switch err := <-done; {
	case err == nil:
		// Stopped gracefully: in-flight batches finished, partitions released.
	case errors.Is(err, context.Canceled):
		log.Printf("stopped before the relay could start: %v", err) // e.g. the database never answered
	default:
		log.Fatalf("the relay cannot run: %v", err) // ErrRepartitioned, a relay that cannot start, ...
	}
}
