// Package coretest helps test code that publishes through Outboxer: relays that record
// or fail on demand, for an instance in Manual mode delivered with Drain.
//
//	rec := &coretest.Recorder{}
//	ob, _ := core.New(core.Config{DB: db, Manual: true, Outboxes: map[string]core.OutboxConfig{
//		"orders": {Relay: rec},
//	}})
//	// ... the code under test publishes ...
//	ob.Drain(ctx, "orders")
//	got := rec.Delivered() // what the relay confirmed, in order
package coretest
