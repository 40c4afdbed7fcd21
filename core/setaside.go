package core

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/outboxer-go/outboxer/core/internal/dialect"
)

// Setting a blocked group aside. When a message of a group waits (for its retry), the
// later messages of its group wait behind it: a fetch that reads them finds them behind
// and holds them, so that later fetches read them no more. A group can have any number
// of messages behind its head, and a fetch reads the partition in ID order: reading
// them batch by batch before the messages after them would keep every other group of
// the partition waiting for as long as the set-aside takes.
//
// So a worker whose fetch found a group's rows behind keeps the group in its set-aside
// list. Every round it holds the next chunk of the group's ready rows behind the head
// (read by the index of a group's ready rows, not the partition's), and the fetch leaves
// out the ID range of the rest, and, past the range, every message of a group that has a
// ready row in it (dialect FetchAround): those go after it, in order. The other groups'
// messages go at once, the set-aside goes on a chunk a round between their batches, and
// a range's other messages wait only until the set-aside passes them. When the head is
// delivered or discarded its group's held rows are released as before, the group leaves
// the list (nothing of it is behind), and its rows, held or not, are read in ID order.

// maxAside bounds the groups a worker sets aside at once; those of more blocked groups
// are held as a fetch reads them, the way every group's were.
const maxAside = 4

// While messages come to deliver, a worker sets a chunk aside (and reads the ranges
// again) every asideEvery; once none came for asideQuiet, every round. A chunk is a
// transaction: ready messages that came meanwhile would wait for it, round after round.
const (
	asideEvery = 100 * time.Millisecond
	asideQuiet = 50 * time.Millisecond
)

// asides is a worker's set-aside list, and the ID ranges its fetches leave out.
type asides struct {
	groups  []asideGroup
	skip    []dialect.Range
	at      time.Time // when the ranges were read
	added   bool      // a group was added since
	readyAt time.Time // when a fetch last had messages to deliver
}

type asideGroup struct {
	key  string
	from int64 // the group's ready rows behind its head start here or later
}

// note adds the group of a row a fetch found behind (id) to the list.
func (a *asides) note(key string, id int64) {
	if key == "" || len(a.groups) >= maxAside {
		return
	}
	for _, g := range a.groups {
		if g.key == key {
			return
		}
	}
	a.groups = append(a.groups, asideGroup{key: key, from: id})
	a.added = true
}

// setAside holds the next chunk of the first listed group's rows behind its head, and
// works out the ranges the next fetch leaves out. A group with nothing left behind its
// head leaves the list. It returns how many rows it held.
//
// Between two readings the fetches leave out the ranges last read: a range that is out
// of date (its head delivered since, the set-aside gone on) keeps its rows from a fetch
// a little longer, and puts nothing out of order (see dialect FetchAround).
func (w *worker) setAside(ctx context.Context) (int, error) {
	a := &w.aside
	if len(a.groups) == 0 || w.mode() != dialect.Grouped {
		a.groups, a.skip = a.groups[:0], a.skip[:0]
		return 0, nil
	}
	if !a.added && time.Since(a.readyAt) < asideQuiet && time.Since(a.at) < asideEvery {
		return 0, nil
	}
	a.at, a.added = time.Now(), false
	a.skip = a.skip[:0]
	chunk := w.ob.cfg.BatchSize
	held := 0
	var keep []asideGroup
	for i, g := range a.groups {
		limit := 1
		if i == 0 {
			limit = chunk + 1
		}
		ids, last, err := w.asideRows(ctx, g, limit)
		if err != nil {
			return held, err
		}
		if len(ids) == 0 {
			continue // nothing of the group is behind now
		}
		if i == 0 {
			n := min(chunk, len(ids))
			if err := w.hold(ctx, ids[:n]); err != nil {
				return held, err
			}
			held += n
			if len(ids) <= chunk {
				continue // the last of it
			}
			ids = ids[chunk:]
		}
		g.from = ids[0]
		keep = append(keep, g)
		a.skip = append(a.skip, dialect.Range{From: ids[0], To: last})
	}
	// The next round holds a chunk of the next group.
	if len(keep) > 1 && keep[0].key == a.groups[0].key {
		keep = append(keep[1:], keep[0])
	}
	a.groups = keep
	slices.SortFunc(a.skip, func(x, y dialect.Range) int { return cmp.Compare(x.From, y.From) })
	merged := a.skip[:0]
	for _, r := range a.skip {
		if n := len(merged); n > 0 && r.From <= merged[n-1].To {
			merged[n-1].To = max(merged[n-1].To, r.To)
			continue
		}
		merged = append(merged, r)
	}
	a.skip = merged
	return held, nil
}

// asideRows reads up to limit IDs of g's ready rows behind its head, from g.from on,
// and the group's last ready ID.
func (w *worker) asideRows(ctx context.Context, g asideGroup, limit int) (ids []int64, last int64, err error) {
	q, args := w.ob.sql.Aside(w.ob.name, w.part, g.key, g.from, limit)
	err = queryRows(ctx, w.o.cfg.DB, q, args, func(scan func(...any) error) error {
		var id int64
		if err := scan(&id, &last); err != nil {
			return err
		}
		ids = append(ids, id)
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read the rows behind a blocked group: %w", err)
	}
	return ids, last, nil
}
