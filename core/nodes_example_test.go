package core_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/outboxer-go/outboxer/core"
)

// Relay nodes share each outbox's partitions: every running instance takes its fair share.
// MaxPartitions caps a node's share (the others share the rest); core.AllPartitions takes
// a node out of the share-out, to take every partition nobody holds. The instance's owner
// name, under which it holds leases and heartbeats, begins with Config.Name.
func ExampleConfig_maxPartitions() {
	relay := core.RelayFunc(func(context.Context, []core.Envelope) error { return nil })
	ob, err := core.New(core.Config{
		Name: "billing", DB: new(sql.DB), Dialect: core.Postgres, // New does no I/O
		MaxPartitions: 2, // this node holds at most 2 partitions of each outbox
		Outboxes:      map[string]core.OutboxConfig{"invoices": {Relay: relay, Partitions: 8}},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.HasPrefix(ob.Owner(), "billing@"), strings.Count(ob.Owner(), "/"))
	_, err = core.New(core.Config{DB: new(sql.DB), Dialect: core.Postgres, MaxPartitions: -5,
		Outboxes: map[string]core.OutboxConfig{"invoices": {Relay: relay}}})
	fmt.Println(err)
	// Output:
	// true 2
	// outboxer: invalid configuration: MaxPartitions: must be 0 (fair share), a positive cap or AllPartitions (-1), got -5
}

// Health lists the live relay nodes of each outbox, what each holds and its last
// heartbeat: here, as (*Outboxer).Health would read it with three nodes on 8 partitions.
func ExampleOutboxHealth_nodes() {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	oh := core.OutboxHealth{Outbox: "invoices", Nodes: []core.NodeHealth{
		{Node: "billing@host-1/41/9f2c", LastHeartbeat: at.Add(-300 * time.Millisecond), Share: 3, Partitions: []int{0, 3, 6}},
		{Node: "billing@host-2/17/a0b1", LastHeartbeat: at.Add(-800 * time.Millisecond), Share: 3, Partitions: []int{1, 4, 7}},
		{Node: "billing@host-3/23/77e0", LastHeartbeat: at.Add(-100 * time.Millisecond), Share: 2, Partitions: []int{2, 5}},
	}}
	for _, n := range oh.Nodes {
		fmt.Printf("%s holds %v (share %d), heartbeat %v ago\n", n.Node, n.Partitions, n.Share, at.Sub(n.LastHeartbeat))
	}
	// Output:
	// billing@host-1/41/9f2c holds [0 3 6] (share 3), heartbeat 300ms ago
	// billing@host-2/17/a0b1 holds [1 4 7] (share 3), heartbeat 800ms ago
	// billing@host-3/23/77e0 holds [2 5] (share 2), heartbeat 100ms ago
}
