package coretest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/coretest"
)

func TestRecorder(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	r := &coretest.Recorder{Fail: coretest.FailFirst(1, boom)}
	batch := []core.Envelope{{ID: 1, GroupKey: "a"}, {ID: 2, GroupKey: "b"}, {ID: 3, GroupKey: "a"}}
	if err := r.Deliver(ctx, batch); !errors.Is(err, boom) {
		t.Fatalf("first batch: %v", err)
	}
	if len(r.Delivered()) != 0 {
		t.Fatalf("a failed batch was recorded")
	}
	if err := r.Deliver(ctx, batch); err != nil {
		t.Fatal(err)
	}
	r.Fail = coretest.FailIDs(boom, 2)
	err := r.Deliver(ctx, batch)
	var pf *core.PartialFailure
	if !errors.As(err, &pf) || len(pf.Failed) != 1 || !errors.Is(pf.Failed[2], boom) {
		t.Fatalf("FailIDs: %v", err)
	}
	var ids []int64
	for _, e := range r.Delivered() {
		ids = append(ids, e.ID)
	}
	if want := []int64{1, 2, 3, 1, 3}; len(ids) != len(want) || ids[3] != 1 || ids[4] != 3 {
		t.Errorf("delivered %v, want %v", ids, want)
	}
	if r.Batches() != 3 {
		t.Errorf("batches = %d", r.Batches())
	}
	// A later message of a failed one's group is not counted delivered.
	r.Reset()
	r.Fail = coretest.FailIDs(boom, 1)
	_ = r.Deliver(ctx, batch)
	if got := r.Delivered(); len(got) != 1 || got[0].ID != 2 {
		t.Errorf("after failing 1 of group a: delivered %v, want only 2", got)
	}
	r.Reset()
	if len(r.Delivered()) != 0 || r.Batches() != 0 {
		t.Error("Reset kept something")
	}
}

// The recorder reads a partial failure as the engine does, with errors.As: wrapped, its
// failed messages and what follows them in their group are not recorded; a nil one
// records the whole batch.
func TestRecorderReadsPartialFailuresAsTheEngine(t *testing.T) {
	batch := []core.Envelope{{ID: 1, GroupKey: "a"}, {ID: 2, GroupKey: "a"}, {ID: 3, GroupKey: "b"}}
	var wrapped coretest.Recorder
	wrapped.Fail = func([]core.Envelope) error {
		return fmt.Errorf("relay: %w", &core.PartialFailure{Failed: map[int64]error{1: errors.New("no")}})
	}
	_ = wrapped.Deliver(context.Background(), batch)
	if got := wrapped.Delivered(); len(got) != 1 || got[0].ID != 3 {
		t.Errorf("wrapped partial failure: recorded %v, want only 3", got)
	}
	var typedNil coretest.Recorder
	typedNil.Fail = func([]core.Envelope) error {
		var pf *core.PartialFailure
		return pf
	}
	_ = typedNil.Deliver(context.Background(), batch)
	if got := typedNil.Delivered(); len(got) != 3 {
		t.Errorf("nil partial failure: recorded %v, want the whole batch", got)
	}
}
