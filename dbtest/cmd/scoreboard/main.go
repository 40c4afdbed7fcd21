// Command scoreboard renders RELIABILITY.md from the rows the reliability suite's tests
// recorded (dbtest.Record, one JSON object a line in the OUTBOXER_SCOREBOARD file) and
// the results of the fuzz targets. `make chaos` runs it; it writes only what the rows
// say, and names the scenarios that recorded none.
//
//	go run ./cmd/scoreboard -scores scores.jsonl -fuzz fuzz.txt -command "make chaos" -out ../RELIABILITY.md
//
// The fuzz file has a line per target: "<name> <pass|FAIL> <fuzztime> [detail]".
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxer-go/outboxer/dbtest"
)

// scenarios names the suite's scenarios, so that one with no rows shows as missing.
var scenarios = []string{
	1:  "out-of-order commits",
	2:  "long or idle transaction",
	3:  "crash mid-batch",
	4:  "killed sessions and restarts",
	5:  "concurrent publishers, 20% rollbacks",
	6:  "relay processes, one paused",
	7:  "poison message",
	8:  "huge payloads and big batches",
	9:  "hostile configuration and input",
	10: "restore from pg_dump",
	11: "unreadable rows",
	12: "effectively once (inbox)",
	13: "blocked and scheduled backlogs",
	14: "names differing in trailing spaces",
	15: "relay nodes joining, leaving, crashing, freezing",
	16: "partition count changes",
	17: "poison messages among other groups",
}

func main() {
	scores := flag.String("scores", "", "the JSON-lines file of score rows (required)")
	fuzz := flag.String("fuzz", "", "the fuzz results file, a line per target")
	command := flag.String("command", "make chaos", "the command the rows came from")
	out := flag.String("out", "RELIABILITY.md", "where to write the scoreboard")
	rev := flag.String("rev", "", "the commit the rows came from, when not the one checked out (rows of several runs)")
	flag.Parse()
	if err := run(*scores, *fuzz, *command, *rev, *out); err != nil {
		fmt.Fprintln(os.Stderr, "scoreboard:", err)
		os.Exit(1)
	}
}

func run(scoresPath, fuzzPath, command, rev, out string) error {
	if scoresPath == "" {
		return fmt.Errorf("-scores is required")
	}
	rows, err := readScores(scoresPath)
	if err != nil {
		return err
	}
	var fuzz []string
	if fuzzPath != "" {
		if fuzz, err = readLines(fuzzPath); err != nil {
			return err
		}
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if rev == "" {
		rev = revision()
	}
	if err := render(f, rows, fuzz, command, rev, time.Now().UTC()); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func readScores(path string) ([]dbtest.Score, error) {
	lines, err := readLines(path)
	if err != nil {
		return nil, err
	}
	rows := make([]dbtest.Score, 0, len(lines))
	for i, l := range lines {
		var s dbtest.Score
		if err := json.Unmarshal([]byte(l), &s); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, i+1, err)
		}
		rows = append(rows, s)
	}
	return rows, nil
}

func readLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			lines = append(lines, l)
		}
	}
	return lines, sc.Err()
}

// revision is the commit checked out, and whether the tree had changes (the workspace's
// checksum file, which go commands rewrite, and the scoreboard itself do not count).
func revision() string {
	rev, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	s := strings.TrimSpace(string(rev))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!go.work.sum", ":!RELIABILITY.md").Output(); err == nil && len(st) > 0 {
		s += " (with uncommitted changes)"
	}
	return s
}

// number is the scenario number a row's Scenario starts with (0 if none).
func number(s dbtest.Score) int {
	n, _ := strconv.Atoi(strings.Fields(s.Scenario + " x")[0])
	return n
}

// group is the rows of one scenario on one database, summed.
type group struct {
	scenario, database string
	num                int
	rows               []dbtest.Score
	sum                dbtest.Score
	passed             bool
	long               bool
}

func groups(rows []dbtest.Score) []*group {
	by := map[[2]string]*group{}
	var out []*group
	for _, r := range rows {
		k := [2]string{r.Scenario, r.Database}
		g, ok := by[k]
		if !ok {
			g = &group{scenario: r.Scenario, database: r.Database, num: number(r), passed: true, long: true}
			by[k] = g
			out = append(out, g)
		}
		g.rows = append(g.rows, r)
		g.sum.Published += r.Published
		g.sum.Committed += r.Committed
		g.sum.Delivered += r.Delivered
		g.sum.Lost += r.Lost
		g.sum.Phantom += r.Phantom
		g.sum.Reordered += r.Reordered
		g.sum.Duplicated += r.Duplicated
		g.sum.Recover = max(g.sum.Recover, r.Recover)
		g.passed = g.passed && r.Passed
		g.long = g.long && r.Long
	}
	slices.SortStableFunc(out, func(a, b *group) int {
		return cmp.Or(cmp.Compare(a.num, b.num), cmp.Compare(a.scenario, b.scenario), cmp.Compare(a.database, b.database))
	})
	return out
}

func recoverText(d time.Duration) string {
	if d <= 0 {
		return "–"
	}
	return d.Round(time.Millisecond).String()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "**NO**"
}

func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}

func render(w io.Writer, rows []dbtest.Score, fuzz []string, command, rev string, now time.Time) error {
	gs := groups(rows)
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	p("# Reliability scoreboard\n\n")
	p("Written by `%s` on %s at commit %s, from %d score row(s) recorded by the tests of the\n",
		command, now.Format("2006-01-02 15:04 MST"), rev, len(rows))
	p("reliability suite (long versions, `OUTBOXER_CHAOS=1`; restarts of the databases with\n")
	p("`OUTBOXER_DISRUPTIVE=1`). Do not edit by hand: run `%s` again.\n\n", command)

	var lost, reordered, phantom, failed int
	for _, r := range rows {
		lost += r.Lost
		reordered += r.Reordered
		phantom += r.Phantom
		if !r.Passed {
			failed++
		}
	}
	p("**Totals:** %d lost, %d reordered, %d phantom (rolled back yet delivered); %d of %d row(s) failed.\n\n",
		lost, reordered, phantom, failed, len(rows))

	p("A row sums the variants of a scenario on one database (a sink's name for scenario 7).\n")
	p("*Delivered* counts distinct committed messages that reached the consumer; *lost*, committed\n")
	p("ones that never did; *phantom*, deliveries of messages that never committed; *reordered*,\n")
	p("first deliveries after a later message of their group; *duplicated*, deliveries again of a\n")
	p("message (at least once: the docs allow them after a crash or a failed confirmation);\n")
	p("*time to recover*, the longest time from a fault to traffic flowing again. In scenario 7\n")
	p("each run's poison message is committed but never delivered, by design: it goes dead, or\n")
	p("is discarded while it blocks its group (see the notes of each variant); in scenario 17 the\n")
	p("poison messages are counted committed, not delivered, and must be the only ones dead. Scenario 13 counts\n")
	p("the ready messages only: its backlogs wait by design; the variant says how large they are,\n")
	p("and the notes how long a ready message waited without and with them.\n\n")
	p("| scenario | database | variants | published | committed | delivered | lost | phantom | reordered | duplicated | time to recover | passed |\n")
	p("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, g := range gs {
		s := g.sum
		p("| %s | %s | %d | %d | %d | %d | %d | %d | %d | %d | %s | %s |\n", cell(g.scenario), cell(g.database), len(g.rows),
			s.Published, s.Committed, s.Delivered, s.Lost, s.Phantom, s.Reordered, s.Duplicated, recoverText(s.Recover), yesNo(g.passed))
	}
	have := map[int]bool{}
	for _, g := range gs {
		have[g.num] = true
	}
	var missing []string
	for n, name := range scenarios {
		if name != "" && !have[n] {
			missing = append(missing, fmt.Sprintf("%d (%s)", n, name))
		}
	}
	if len(missing) > 0 {
		p("\nScenarios with no rows in this run: %s.\n", strings.Join(missing, ", "))
	}
	short := 0
	for _, r := range rows {
		if !r.Long {
			short++
		}
	}
	if short > 0 {
		p("\n%d row(s) came from the short (CI) versions.\n", short)
	}

	p("\n## Fuzz targets\n\n")
	if len(fuzz) == 0 {
		p("No fuzz target ran.\n")
	} else {
		p("`go test -fuzz` on the core's targets (core/fuzz_test.go), each for the time shown:\n\n")
		for _, l := range fuzz {
			p("- %s\n", cell(l))
		}
	}

	p("\n## Variants\n\n")
	p("| scenario | variant | database | published | delivered | lost | reordered | duplicated | recover | passed | notes |\n")
	p("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |\n")
	for _, g := range gs {
		for _, r := range g.rows {
			p("| %s | %s | %s | %d | %d | %d | %d | %d | %s | %s | %s |\n", cell(r.Scenario), cell(r.Variant), cell(r.Database),
				r.Published, r.Delivered, r.Lost, r.Reordered, r.Duplicated, recoverText(r.Recover), yesNo(r.Passed), cell(r.Notes))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
