package core_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/outboxer-go/outboxer/core"
)

// Check turns a health reading into an error for a readiness probe or an alert; each
// problem matches its sentinel (and core.ErrUnhealthy) with errors.Is.
func ExampleHealth_Check() {
	// What (*Outboxer).Health reads from the database; written out here.
	h := core.Health{Outboxes: []core.OutboxHealth{
		{Outbox: "audit", Pending: 3, OldestAge: 2 * time.Second, Owners: map[string]int{"node-a/41/9f2c": 1}},
		{Outbox: "orders", Pending: 1200, OldestAge: 7 * time.Minute, Dead: 2, Unowned: []int{3},
			Owners: map[string]int{"node-a/41/9f2c": 3}},
	}}
	limits := core.HealthLimits{MaxAge: 5 * time.Minute}

	err := h.Check(limits)
	fmt.Println(errors.Is(err, core.ErrUnhealthy), errors.Is(err, core.ErrLagging),
		errors.Is(err, core.ErrDeadMessages), errors.Is(err, core.ErrUnownedPartitions))
	fmt.Println(err)

	audit, _ := h.Outbox("audit")
	fmt.Println("audit:", audit.Check(limits))
	// Output:
	// true true true true
	// outboxer: delivery lags: outbox "orders": the oldest due message has waited 7m0s (limit 5m0s)
	// outboxer: dead messages: outbox "orders": 2 dead (limit 0)
	// outboxer: partitions without an owner: outbox "orders": no live owner for partition 3
	// audit: <nil>
}

// A readiness endpoint: unready while delivery lags by more than a minute or a message is
// dead. A node that only publishes would add AllowUnowned.
func ExampleOutboxer_CheckHealth() {
	var ob *core.Outboxer // from core.New
	mux := http.NewServeMux()

	mux.HandleFunc("/ready", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		err := ob.CheckHealth(ctx, core.HealthLimits{MaxAge: time.Minute})
		switch {
		case errors.Is(err, core.ErrUnhealthy):
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		case err != nil: // the database could not be read
			http.Error(w, err.Error(), http.StatusInternalServerError)
		default:
			fmt.Fprintln(w, "ok")
		}
	})
}
