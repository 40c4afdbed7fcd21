package sinktest_test

import (
	"context"
	"fmt"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/sinktest"
)

// Drive hands a relay batches the way the engine does. This relay refuses the first
// message of group g0 once and, to keep the group's order, sends nothing after it in
// that group; Drive hands the three of them again in the next call.
func ExampleDrive() {
	var sent []int64
	refused := false
	relay := core.RelayFunc(func(ctx context.Context, batch []core.Envelope) error {
		failed := map[int64]error{}
		blocked := map[string]bool{}
		for _, env := range batch {
			if env.ID == 1 && !refused {
				refused = true
				failed[env.ID] = fmt.Errorf("broker busy")
				blocked[env.GroupKey] = true
				continue
			}
			if blocked[env.GroupKey] {
				failed[env.ID] = fmt.Errorf("held back behind a failed message")
				continue
			}
			sent = append(sent, env.ID)
		}
		if len(failed) > 0 {
			return &core.PartialFailure{Failed: failed}
		}
		return nil
	})
	envs := sinktest.Envelopes(6, 2) // g0: 1, 3, 5; g1: 2, 4, 6
	res, err := sinktest.Drive(context.Background(), relay, envs, sinktest.DriveOptions{BatchSize: 6})
	fmt.Println(res.Calls, res.Failures, err)
	fmt.Println(sent)
	// Output:
	// 2 1 <nil>
	// [2 4 6 1 3 5]
}
