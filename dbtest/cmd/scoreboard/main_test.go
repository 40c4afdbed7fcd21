package main

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/dbtest"
)

func TestRenderSumsAScenarioPerDatabase(t *testing.T) {
	rows := []dbtest.Score{
		{Scenario: "7 poison message", Variant: "a", Database: "kafka", Published: 32, Committed: 32, Delivered: 31, Duplicated: 7, Recover: 2 * time.Second, Passed: true, Long: true},
		{Scenario: "7 poison message", Variant: "b", Database: "kafka", Published: 32, Committed: 32, Delivered: 30, Lost: 1, Recover: time.Second, Passed: false, Long: true},
		{Scenario: "10 restore", Database: "postgres", Published: 5, Committed: 5, Delivered: 5, Passed: true},
	}
	var b strings.Builder
	if err := render(&b, rows, []string{"FuzzX pass 30s"}, "make chaos", "abc", time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| 7 poison message | kafka | 2 | 64 | 64 | 61 | 1 | 0 | 0 | 7 | 2s | **NO** |",
		"| 10 restore | postgres | 1 | 5 | 5 | 5 | 0 | 0 | 0 | 0 | – | yes |",
		"**Totals:** 1 lost, 0 reordered, 0 phantom (rolled back yet delivered); 1 of 3 row(s) failed.",
		"Scenarios with no rows in this run: 1 (out-of-order commits)",
		"14 (names differing in trailing spaces), 15 (relay nodes joining, leaving, crashing, freezing), 16 (partition count changes), 17 (poison messages among other groups).",
		"1 row(s) came from the short (CI) versions.",
		"- FuzzX pass 30s",
		"at commit abc",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	// Scenario 7 sorts before 10 (by number, not as text).
	if strings.Index(out, "| 7 poison") > strings.Index(out, "| 10 restore") {
		t.Errorf("scenarios out of order:\n%s", out)
	}
}
