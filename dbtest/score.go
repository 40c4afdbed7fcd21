package dbtest

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Score is one row of the reliability scoreboard: what a fault scenario published,
// what committed, and what a consumer recorded. Tests of the reliability suite fill one
// in after checking it (a test fails on its own; the row reports what was seen).
type Score struct {
	Scenario   string        `json:"scenario"` // "1 out-of-order commits", say
	Variant    string        `json:"variant,omitempty"`
	Database   string        `json:"database"` // "postgres", "mysql", "sqlite", or a sink's name
	Published  int           `json:"published"`
	Committed  int           `json:"committed"`
	Delivered  int           `json:"delivered"` // distinct committed messages the consumer saw
	Lost       int           `json:"lost"`      // committed and never delivered
	Phantom    int           `json:"phantom"`   // delivered but never committed (rolled back)
	Reordered  int           `json:"reordered"` // deliveries out of order within their group
	Duplicated int           `json:"duplicated"`
	Recover    time.Duration `json:"recover_ns,omitempty"` // from the fault to traffic flowing again
	Notes      string        `json:"notes,omitempty"`
	Passed     bool          `json:"passed"`
	Long       bool          `json:"long"` // run with OUTBOXER_CHAOS set
}

// ScoreboardEnv names the file scores are appended to (JSON lines); unset, Record only logs.
const ScoreboardEnv = "OUTBOXER_SCOREBOARD"

// ChaosEnv, when set to a positive number, selects the long versions of the reliability
// scenarios and scales them by that factor; unset, the short versions run (as in CI).
const ChaosEnv = "OUTBOXER_CHAOS"

// Long reports whether the long versions of the reliability scenarios were asked for.
func Long() bool { return ChaosScale() > 0 }

// ChaosScale is the value of OUTBOXER_CHAOS (0 when unset or not a positive integer).
func ChaosScale() int {
	n, err := strconv.Atoi(os.Getenv(ChaosEnv))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// Pick returns short normally and long when the long versions were asked for.
func Pick(short, long int) int {
	if Long() {
		return long
	}
	return short
}

var scoreMu sync.Mutex

// Record logs s and, when OUTBOXER_SCOREBOARD names a file, appends it there. Passed is
// taken from the test: call Record at the end of the test (or in t.Cleanup) so that a
// failed check shows as a failed row.
func Record(t testing.TB, s Score) {
	t.Helper()
	s.Passed = !t.Failed()
	s.Long = Long()
	t.Logf("score: %s %s [%s]: published %d committed %d delivered %d lost %d phantom %d reordered %d duplicated %d recover %v passed %v",
		s.Scenario, s.Variant, s.Database, s.Published, s.Committed, s.Delivered, s.Lost, s.Phantom, s.Reordered, s.Duplicated, s.Recover, s.Passed)
	path := os.Getenv(ScoreboardEnv)
	if path == "" {
		return
	}
	line, err := json.Marshal(s)
	if err != nil {
		t.Errorf("dbtest: score: %v", err)
		return
	}
	scoreMu.Lock()
	defer scoreMu.Unlock()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("dbtest: score: %v", err)
		return
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "%s\n", line); err != nil {
		t.Errorf("dbtest: score: %v", err)
	}
}

// Delivery is one delivery a consumer recorded, in the order it saw them.
type Delivery struct {
	ID       int64
	GroupKey string
}

// Tally fills the counting fields of s from the IDs that committed (ID → group key) and
// the deliveries in the order the consumer saw them; a delivered ID that never committed
// (a rolled-back write) counts as a phantom.
// Order is judged on first deliveries: within a group, a message first delivered after
// a higher ID of the same group counts as reordered (the engine delivers a group in ID
// order; a redelivery of an earlier batch is a duplicate, not a reordering).
func Tally(s Score, committed map[int64]string, deliveries []Delivery) Score {
	s.Committed = len(committed)
	seen := make(map[int64]bool, len(deliveries))
	last := map[string]int64{}
	for _, d := range deliveries {
		if seen[d.ID] {
			s.Duplicated++
			continue
		}
		seen[d.ID] = true
		if _, ok := committed[d.ID]; !ok {
			s.Phantom++ // rolled back, or never written by the test at all
			continue
		}
		s.Delivered++
		if prev, ok := last[d.GroupKey]; ok && d.ID < prev {
			s.Reordered++
			continue
		}
		last[d.GroupKey] = d.ID
	}
	for id := range committed {
		if !seen[id] {
			s.Lost++
		}
	}
	return s
}
