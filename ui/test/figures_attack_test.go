package uitest

import (
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	outboxerui "github.com/outboxer-go/outboxer/ui"
)

// The attacks on the figures of the overview and the outbox page: every figure
// the pages show, parsed from their HTML, is the truth read from the table (core.Health,
// or a count of what the list of the same name lists) when it is shown exact, and a lower
// bound that is not above the truth when it is followed by "+".

// figTable is the message table of these tests: each test has a database of its own.
const figTable = "figs"

// figs is a table with outboxes, a core instance over them (no relay runs: Manual) for
// the truth, and the dashboard over the table.
type figs struct {
	t  testing.TB
	db *dbtest.DB
	ob *core.Outboxer
	h  http.Handler
}

func newFigs(t testing.TB, db *dbtest.DB, outboxes map[string]core.OutboxConfig) *figs {
	t.Helper()
	for name, c := range outboxes {
		c.Relay = core.RelayFunc(func(context.Context, []core.Envelope) error { return nil })
		outboxes[name] = c
	}
	ob, err := core.New(core.Config{DB: db.DB, Dialect: db.Dialect, Table: figTable, Manual: true, Codec: rawCodec, Outboxes: outboxes})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	h, err := outboxerui.New(outboxerui.Config{Instances: []outboxerui.Instance{{Name: "main", DB: db.DB, Dialect: db.Dialect, Table: figTable}}})
	if err != nil {
		t.Fatal(err)
	}
	return &figs{t: t, db: db, ob: ob, h: h}
}

// publish publishes n messages to outbox, in batches of 1000, and returns their IDs.
func (f *figs) publish(outbox string, n int, opts ...core.PublishOption) []int64 {
	f.t.Helper()
	var out []int64
	for n > 0 {
		k := min(n, 1000)
		ms := make([]core.Message, k)
		for i := range ms {
			ms[i] = msg{outbox, "t", []byte(`{}`)}
		}
		envs, err := f.ob.PublishAll(context.Background(), f.db.DB, ms, opts...)
		if err != nil {
			f.t.Fatal(err)
		}
		for _, e := range envs {
			out = append(out, e.ID)
		}
		n -= k
	}
	return out
}

// exec runs a statement written with ? placeholders.
func (f *figs) exec(q string, args ...any) {
	f.t.Helper()
	if f.db.Dialect == core.Postgres {
		for i := 1; strings.Contains(q, "?"); i++ {
			q = strings.Replace(q, "?", "$"+strconv.Itoa(i), 1)
		}
	}
	if _, err := f.db.ExecContext(context.Background(), q, args...); err != nil {
		f.t.Fatalf("%s: %v", q, err)
	}
}

// at is the database clock plus d, as the dialect stores times.
func (f *figs) at(d time.Duration) string {
	switch f.db.Dialect {
	case core.Postgres:
		return fmt.Sprintf("(now() + interval '%d microseconds')", d.Microseconds())
	case core.MySQL:
		return fmt.Sprintf("(UTC_TIMESTAMP(6) + INTERVAL %d MICROSECOND)", d.Microseconds())
	}
	return fmt.Sprintf("(CAST(unixepoch('subsec') * 1000000 AS INTEGER) + %d)", d.Microseconds())
}

// set changes the state of the messages ids (a statement per 500 of them): to waiting
// for a retry (3), dead (2), held (4). A failed one has one attempt.
func (f *figs) set(ids []int64, state, attempts int, availableIn time.Duration) {
	f.t.Helper()
	at := f.at(availableIn)
	for len(ids) > 0 {
		k := min(len(ids), 500)
		f.exec(`UPDATE ` + figTable + ` SET state = ` + strconv.Itoa(state) + `, attempts = ` + strconv.Itoa(attempts) +
			`, available_at = ` + at + ` WHERE id IN (` + strings.Join(ids2s(ids[:k]), ",") + `)`)
		ids = ids[k:]
	}
}

// count is the exact number of messages of outbox that cond selects, per partition.
func (f *figs) count(outbox, cond string) (total int64, byPart map[int]int64) {
	f.t.Helper()
	q := `SELECT part, COUNT(*) FROM ` + figTable + ` WHERE outbox = ? AND ` + cond + ` GROUP BY part`
	if f.db.Dialect == core.Postgres {
		q = strings.Replace(q, "?", "$1", 1)
	}
	rows, err := f.db.QueryContext(context.Background(), q, outbox)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	byPart = map[int]int64{}
	for rows.Next() {
		var p int
		var n int64
		if err := rows.Scan(&p, &n); err != nil {
			f.t.Fatal(err)
		}
		byPart[p] = n
		total += n
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	return total, byPart
}

func (f *figs) health(outbox string) core.OutboxHealth {
	f.t.Helper()
	h, err := f.ob.Health(context.Background(), outbox)
	if err != nil {
		f.t.Fatal(err)
	}
	return h.Outboxes[0]
}

// page returns the body of a page of the dashboard; it must answer 200.
func (f *figs) page(path string) string {
	f.t.Helper()
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/"+path, nil))
	b, _ := io.ReadAll(rec.Body)
	if rec.Code != http.StatusOK {
		f.t.Fatalf("GET /%s: %d\n%s", path, rec.Code, b)
	}
	return string(b)
}

// figure is a figure as a page shows it: N, or at least N ("N+").
type figure struct {
	N     int64
	Lower bool
	Text  string
}

func parseFigure(t testing.TB, what, s string) figure {
	t.Helper()
	s = strings.TrimSpace(s)
	n, err := strconv.ParseInt(strings.TrimSuffix(s, "+"), 10, 64)
	if err != nil || n < 0 {
		t.Fatalf("%s: %q is not a count", what, s)
	}
	return figure{N: n, Lower: strings.HasSuffix(s, "+"), Text: s}
}

// parseAge reads an age as human writes it ("—": nothing due; "?" or a "+" suffix: a
// lower bound).
func parseAge(t testing.TB, what, s string) (time.Duration, bool) {
	t.Helper()
	s = strings.TrimSpace(s)
	switch s {
	case "—":
		return 0, false
	case "?":
		return 0, true
	}
	lower := strings.HasSuffix(s, "+")
	s = strings.TrimSuffix(s, "+")
	var days time.Duration
	if i := strings.Index(s, "d"); i > 0 {
		n, err := strconv.Atoi(s[:i])
		if err != nil {
			t.Fatalf("%s: age %q", what, s)
		}
		days, s = time.Duration(n)*24*time.Hour, s[i+1:]
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s: age %q: %v", what, s, err)
	}
	return days + d, lower
}

// checkFigure fails unless shown is the truth, or a lower bound not above it; when
// mustBeExact (the truth is within the bounds of what the page reads), it must be shown
// exact.
func checkFigure(t testing.TB, what string, shown figure, truth int64, mustBeExact bool) {
	t.Helper()
	switch {
	case !shown.Lower && shown.N != truth:
		t.Errorf("%s: shown %q as exact, the truth is %d", what, shown.Text, truth)
	case shown.Lower && shown.N > truth:
		t.Errorf("%s: shown %q as a lower bound, above the truth %d", what, shown.Text, truth)
	case shown.Lower && mustBeExact:
		t.Errorf("%s: shown %q as a lower bound, the truth %d is within the bounds of the page", what, shown.Text, truth)
	}
}

// checkAge: an age shown exact is the truth (within the rounding of the page and the
// time between the reads); one shown as a lower bound is not above it.
func checkAge(t testing.TB, what, shown string, truth time.Duration) {
	t.Helper()
	d, lower := parseAge(t, what, shown)
	const slack = time.Minute // human rounds to the minute above an hour; reads are seconds apart
	if !lower && (d < truth-slack || d > truth+slack) {
		t.Errorf("%s: oldest due shown %q as exact, core.Health says %v", what, shown, truth)
	}
	if lower && d > truth+slack {
		t.Errorf("%s: oldest due shown %q as a lower bound, above core.Health's %v", what, shown, truth)
	}
}

var (
	rowRE   = regexp.MustCompile(`(?s)<tr class="outbox-row">(.*?)</tr>`)
	nameRE  = regexp.MustCompile(`<a class="outbox-link" href="[^"]*">([^<]*)</a>`)
	cellRE  = regexp.MustCompile(`(?s)<td[^>]*>(.*?)</td>`)
	tagRE   = regexp.MustCompile(`<[^>]+>`)
	partsRE = regexp.MustCompile(`(?s)<table class="grid" id="partitions">.*?<tbody>(.*?)</tbody>`)
	trRE    = regexp.MustCompile(`(?s)<tr>(.*?)</tr>`)
)

func cells(row string) []string {
	var out []string
	for _, m := range cellRE.FindAllStringSubmatch(row, -1) {
		out = append(out, strings.TrimSpace(html.UnescapeString(tagRE.ReplaceAllString(m[1], ""))))
	}
	return out
}

// overviewRow is an outbox's row of the overview: its cells as text, by column.
type overviewRow struct {
	Pending, Retrying, Scheduled, Dead figure
	Oldest, Partitions, State          string
}

// overview parses the rows of the overview, by outbox name.
func (f *figs) overview() map[string]overviewRow {
	f.t.Helper()
	body := f.page("")
	out := map[string]overviewRow{}
	for _, m := range rowRE.FindAllStringSubmatch(body, -1) {
		c := cells(m[1])
		if len(c) != 10 {
			f.t.Fatalf("an overview row has %d cells: %q", len(c), c)
		}
		c[0] = html.UnescapeString(nameRE.FindStringSubmatch(m[1])[1]) // as it is, spaces included
		if _, dup := out[c[0]]; dup {
			f.t.Fatalf("outbox %q has two rows on the overview", c[0])
		}
		what := "overview " + strconv.Quote(c[0])
		out[c[0]] = overviewRow{
			Pending: parseFigure(f.t, what+" pending", c[1]), Retrying: parseFigure(f.t, what+" retrying", c[2]),
			Scheduled: parseFigure(f.t, what+" scheduled", c[3]), Dead: parseFigure(f.t, what+" dead", c[4]),
			Oldest: c[5], Partitions: c[7], State: c[9],
		}
	}
	return out
}

// outboxPage is what the outbox page shows: the outbox's figures, and a row per partition.
type outboxPage struct {
	Pending, Retrying, Scheduled, Dead figure
	Oldest                             string
	Paused                             bool
	Parts                              map[int][]string // partition → its cells
}

var headRE = regexp.MustCompile(`>([0-9]+\+?) (pending|retrying|scheduled|dead)</a>`)
var oldestRE = regexp.MustCompile(`oldest due (\S+)\s*</p>`)

func (f *figs) outboxPage(outbox string) outboxPage {
	f.t.Helper()
	body := html.UnescapeString(f.page("outbox?" + url.Values{"i": {"main"}, "o": {outbox}}.Encode()))
	what := "outbox page " + strconv.Quote(outbox)
	var p outboxPage
	found := map[string]bool{}
	for _, m := range headRE.FindAllStringSubmatch(body, 4) {
		fig := parseFigure(f.t, what+" "+m[2], m[1])
		found[m[2]] = true
		switch m[2] {
		case "pending":
			p.Pending = fig
		case "retrying":
			p.Retrying = fig
		case "scheduled":
			p.Scheduled = fig
		case "dead":
			p.Dead = fig
		}
	}
	if len(found) != 4 {
		f.t.Fatalf("%s: the figures are not all there (%v):\n%s", what, found, body)
	}
	m := oldestRE.FindStringSubmatch(body)
	if m == nil {
		f.t.Fatalf("%s: no oldest due:\n%s", what, body)
	}
	p.Oldest = m[1]
	p.Paused = strings.Contains(body, `id="paused"`)
	t := partsRE.FindStringSubmatch(body)
	if t == nil {
		f.t.Fatalf("%s: no partition table", what)
	}
	p.Parts = map[int][]string{}
	for _, r := range trRE.FindAllStringSubmatch(t[1], -1) {
		c := cells(r[1])
		n, err := strconv.Atoi(c[0])
		if err != nil || len(c) != 10 {
			f.t.Fatalf("%s: partition row %q", what, c)
		}
		p.Parts[n] = c
	}
	return p
}

// checkAll checks every figure of outbox on both pages against the truth.
func (f *figs) checkAll(outbox string) {
	f.t.Helper()
	t := f.t
	pending, pendingBy := f.count(outbox, "state IN (0, 3, 4)")
	retrying, retryingBy := f.count(outbox, "state IN (3, 4) AND attempts > 0")
	dead, deadBy := f.count(outbox, "state = 2")
	ready, readyBy := f.count(outbox, "state = 0")
	waiting, waitingBy := f.count(outbox, "state IN (3, 4)")
	// The figures read from the waiting and held rows are exact when the page read them
	// all: it reads at least 100 per partition, and every row when no more than 1000
	// wait in the outbox. Per partition, counts are exact up to 1000 (10000 shared among
	// the partitions, at least 1000 each).
	within := func(by map[int]int64, bound int64) bool {
		for _, n := range by {
			if n > bound {
				return false
			}
		}
		return true
	}
	sampledAll := within(waitingBy, 100) || waiting <= 1000
	h := f.health(outbox)
	if h.Pending != pending || h.Dead != dead {
		t.Fatalf("core.Health of %q: %d pending, %d dead; the table: %d, %d", outbox, h.Pending, h.Dead, pending, dead)
	}
	ov, ok := f.overview()[outbox]
	if !ok {
		t.Fatalf("outbox %q has no row on the overview", outbox)
	}
	what := "overview " + strconv.Quote(outbox)
	// The overview counts ready and waiting messages up to 10000 each.
	checkFigure(t, what+" pending", ov.Pending, pending, ready <= 10_000 && waiting <= 10_000)
	checkFigure(t, what+" retrying", ov.Retrying, retrying, sampledAll)
	checkFigure(t, what+" scheduled", ov.Scheduled, h.Scheduled, sampledAll)
	checkFigure(t, what+" dead", ov.Dead, dead, dead <= 10_000)
	checkAge(t, what, ov.Oldest, h.OldestAge)

	op := f.outboxPage(outbox)
	what = "outbox page " + strconv.Quote(outbox)
	checkFigure(t, what+" pending", op.Pending, pending, within(readyBy, 1000) && within(waitingBy, 1000))
	checkFigure(t, what+" retrying", op.Retrying, retrying, sampledAll)
	checkFigure(t, what+" scheduled", op.Scheduled, h.Scheduled, sampledAll)
	checkFigure(t, what+" dead", op.Dead, dead, dead <= 10_000)
	checkAge(t, what, op.Oldest, h.OldestAge)
	if op.Paused != h.Paused {
		t.Errorf("%s: paused %v, core.Health says %v", what, op.Paused, h.Paused)
	}
	for _, ph := range h.Partitions {
		c, ok := op.Parts[ph.Partition]
		if !ok {
			// A partition with dead messages alone is shown when the dead of each
			// partition are read (at most 1000 dead).
			if ph.Pending > 0 || ph.Dead > 0 && dead <= 1000 {
				t.Errorf("%s: partition %d (%d pending, %d dead) is not shown", what, ph.Partition, ph.Pending, ph.Dead)
			}
			continue
		}
		pw := fmt.Sprintf("%s partition %d", what, ph.Partition)
		p := ph.Partition
		checkFigure(t, pw+" backlog", parseFigure(t, pw+" backlog", c[1]), pendingBy[p], readyBy[p] <= 1000 && waitingBy[p] <= 1000)
		checkFigure(t, pw+" retrying", parseFigure(t, pw+" retrying", c[2]), retryingBy[p], waitingBy[p] <= 100 || waiting <= 1000)
		checkFigure(t, pw+" scheduled", parseFigure(t, pw+" scheduled", c[3]), ph.Scheduled, waitingBy[p] <= 100 || waiting <= 1000)
		if c[4] == "—" {
			if dead <= 1000 {
				t.Errorf("%s dead: not shown, with %d dead in the outbox", pw, dead)
			}
		} else {
			checkFigure(t, pw+" dead", parseFigure(t, pw+" dead", c[4]), deadBy[p], true)
		}
		checkAge(t, pw, c[5], ph.OldestAge)
		if paused := c[9] == "yes"; paused != ph.Paused {
			t.Errorf("%s: paused %q, core.Health says %v", pw, c[9], ph.Paused)
		}
	}
}

// TestAttackFiguresAtTheCountBound: 9999, 10000 and 10001 pending messages, all in one
// partition of eight, next to small outboxes of the same table that stay exact.
func TestAttackFiguresAtTheCountBound(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		odd := `o'r "d" <e>&s`
		f := newFigs(t, db, map[string]core.OutboxConfig{
			"big":   {Partitions: 8, Ordering: core.OrderGroup},
			"small": {Partitions: 3},
			odd:     {Partitions: 2},
		})
		f.publish("big", 9999, core.WithGroupKey("one"))
		f.publish("small", 5)
		f.publish(odd, 2)
		for _, want := range []string{"9999", "10000", "10000+"} {
			f.checkAll("big")
			f.checkAll("small")
			f.checkAll(odd)
			ov := f.overview()
			if got := ov["big"].Pending.Text; got != want {
				t.Errorf("overview: big shows %q pending, want %q", got, want)
			}
			if ov["small"].Pending.Text != "5" || ov[odd].Pending.Text != "2" {
				t.Errorf("overview: the small outboxes show %q and %q pending, want 5 and 2", ov["small"].Pending.Text, ov[odd].Pending.Text)
			}
			f.publish("big", 1, core.WithGroupKey("one"))
		}
	})
}

// TestAttackFiguresAtTheSampleBound: 999, 1000 and 1001 waiting messages (failed, one
// partition), the oldest of them failed first and counting from its publication.
func TestAttackFiguresAtTheSampleBound(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFigs(t, db, map[string]core.OutboxConfig{"w": {Partitions: 1}, "w8": {Partitions: 8}})
		ids := f.publish("w", 1005)
		ids8 := f.publish("w8", 1005)
		for _, n := range []int{999, 1000, 1001} {
			f.set(ids[:n], 3, 1, time.Hour)
			f.set(ids8[:n], 3, 1, time.Hour)
			f.checkAll("w")
			f.checkAll("w8")
		}
	})
}

// TestFiguresBelowTheSampleCapAreExact: 376 messages wait in one partition of eight (26 of
// them for a retry, 14 scheduled), more than that partition's share of the sample (64 ready
// messages in the others): every
// figure is exact, and the page does not say that more than the cap wait.
func TestFiguresBelowTheSampleCapAreExact(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		t.Parallel()
		f := newFigs(t, db, map[string]core.OutboxConfig{"o": {Partitions: 8}})
		ids := f.publish("o", 376, core.WithGroupKey("one"))
		f.set(ids[:26], 3, 1, time.Hour)
		f.set(ids[26:40], 3, 0, time.Hour)
		f.set(ids[40:], 4, 0, 0)
		// A ready message in every partition: the sample is shared among eight.
		for i := range 64 {
			f.publish("o", 1, core.WithGroupKey("k"+strconv.Itoa(i)))
		}
		f.checkAll("o")
		ov := f.overview()["o"]
		op := f.outboxPage("o")
		for _, c := range []struct {
			what  string
			shown figure
			want  string
		}{
			{"overview retrying", ov.Retrying, "26"}, {"overview scheduled", ov.Scheduled, "14"}, {"overview pending", ov.Pending, "440"},
			{"outbox page retrying", op.Retrying, "26"}, {"outbox page scheduled", op.Scheduled, "14"}, {"outbox page pending", op.Pending, "440"},
		} {
			if c.shown.Text != c.want {
				t.Errorf("%s: %q, want %q", c.what, c.shown.Text, c.want)
			}
		}
		if body := f.page("outbox?" + url.Values{"i": {"main"}, "o": {"o"}}.Encode()); strings.Contains(body, `id="blocked-sampled"`) {
			t.Errorf("the outbox page says more than the sample cap wait, with 376 waiting")
		}
	})
}

// TestAttackFiguresOfDeadAtThePartitionBound: dead messages split unevenly among
// partitions, 1000 then 1001 of them.
func TestAttackFiguresOfDeadAtThePartitionBound(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFigs(t, db, map[string]core.OutboxConfig{"d": {Partitions: 4, Ordering: core.OrderGroup}})
		a := f.publish("d", 990, core.WithGroupKey("a"))
		b := f.publish("d", 12, core.WithGroupKey("b")) // the last stays pending: see TestAttackFiguresOfDeadOnlyPartition
		f.publish("d", 3, core.WithGroupKey("c"))
		f.set(a, 2, 1, 0)
		f.set(b[:10], 2, 1, 0)
		f.checkAll("d")
		f.set(b[10:11], 2, 1, 0)
		f.checkAll("d")
	})
}

// TestAttackFiguresOfAges: a failed message waits since its publication; a scheduled one
// past its time since that time, one in the future not at all; held rows; a paused
// outbox; ready rows with IDs below the waiting ones and above them.
func TestAttackFiguresOfAges(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFigs(t, db, map[string]core.OutboxConfig{
			"low": {Partitions: 2}, "high": {Partitions: 2}, "sched": {Partitions: 1}, "held": {Partitions: 1, Ordering: core.OrderGroup},
		})
		back := func(ids []int64, d time.Duration) {
			f.t.Helper()
			at := f.at(-d)
			f.exec(`UPDATE ` + figTable + ` SET created_at = ` + at + `, available_at = ` + at + ` WHERE id IN (` + strings.Join(ids2s(ids), ",") + `)`)
		}
		// Ready rows with the lowest IDs, a failed one published before them.
		low := f.publish("low", 20)
		back(low[:10], 2*time.Hour)
		back(low[10:], 3*time.Hour)
		f.set(low[10:12], 3, 1, time.Hour)
		// Failed rows with the lowest IDs, ready ones after them.
		high := f.publish("high", 20)
		back(high, time.Hour)
		back(high[:2], 5*time.Hour)
		f.set(high[:2], 3, 2, time.Hour)
		// Scheduled: one past its time, not promoted (no relay runs), one in the future.
		s := f.publish("sched", 2, core.WithDelay(time.Hour))
		back(s[:1], 90*time.Minute)
		f.set(s[:1], 3, 0, -90*time.Minute)
		// A failed message of a group, and the group held behind it.
		g := f.publish("held", 5, core.WithGroupKey("g"))
		back(g, 4*time.Hour)
		f.set(g[:1], 3, 1, time.Hour)
		f.set(g[1:], 4, 0, -4*time.Hour)
		if err := f.ob.Pause(context.Background(), "held"); err != nil {
			t.Fatal(err)
		}
		for _, o := range []string{"low", "high", "sched", "held"} {
			f.checkAll(o)
		}
		if ov := f.overview()["held"]; ov.State != "paused" {
			t.Errorf("overview: the paused outbox shows state %q", ov.State)
		}
	})
}

// TestAttackFiguresOfNamesPaddedWithSpaces: 'orders' and 'orders ' are two outboxes (on
// MariaDB too, whose usual collations compare them equal).
func TestAttackFiguresOfNamesPaddedWithSpaces(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFigs(t, db, map[string]core.OutboxConfig{"orders": {Partitions: 2}, "orders ": {Partitions: 2}, "Orders": {Partitions: 1}})
		f.publish("orders", 2)
		f.set(f.publish("orders ", 3), 2, 1, 0)
		f.publish("Orders", 4, core.WithDelay(time.Hour))
		ov := f.overview()
		if len(ov) != 3 {
			t.Fatalf("the overview shows %d outboxes, want 3: %v", len(ov), ov)
		}
		for _, o := range []string{"orders", "orders ", "Orders"} {
			f.checkAll(o)
		}
	})
}

// TestAttackFiguresOfOwners: partitions nobody owns (no relay runs) and partitions a
// running node owns.
func TestAttackFiguresOfOwners(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFigs(t, db, map[string]core.OutboxConfig{"idle": {Partitions: 4}, "run": {Partitions: 3}})
		f.publish("idle", 7, core.WithGroupKey("x"))
		run, err := core.New(core.Config{DB: db.DB, Dialect: db.Dialect, Table: figTable, Codec: rawCodec,
			Outboxes: map[string]core.OutboxConfig{"run": {Partitions: 3, Relay: core.RelayFunc(func(context.Context, []core.Envelope) error { return nil })}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = run.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		deadline := time.Now().Add(30 * time.Second)
		for f.health("run").Owners[run.Owner()] != 3 {
			if time.Now().After(deadline) {
				t.Fatalf("the node never held the 3 partitions: %+v", f.health("run"))
			}
			time.Sleep(50 * time.Millisecond)
		}
		ov := f.overview()
		if got := ov["run"].Partitions; got != "3 (3 owned)" {
			t.Errorf("overview: run shows partitions %q, want 3 (3 owned)", got)
		}
		f.checkAll("run")
		// No relay of idle ever ran: the dashboard knows its partitions from the messages
		// only, and must list as unowned every partition core.Health says is unowned and
		// holds messages.
		h := f.health("idle")
		got := ov["idle"].Partitions
		if !strings.Contains(got, "(0 owned, unowned: ") {
			t.Errorf("overview: idle shows partitions %q, core.Health says %d owned, unowned %v", got, len(h.Owners), h.Unowned)
		}
		unowned := strings.Split(strings.TrimSuffix(got[strings.Index(got, "unowned: ")+len("unowned: "):], ")"), ", ")
		for _, ph := range h.Partitions {
			if ph.Pending > 0 && !slices.Contains(unowned, strconv.Itoa(ph.Partition)) {
				t.Errorf("overview: idle shows partitions %q, without partition %d (%d pending, nobody delivers it)", got, ph.Partition, ph.Pending)
			}
		}
		f.checkAll("idle")
	})
}

// TestAttackFiguresUnderChurn: rows change between the statements of a page (published,
// failed, dead, delivered): no page fails, and no figure is negative.
func TestAttackFiguresUnderChurn(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFigs(t, db, map[string]core.OutboxConfig{"c": {Partitions: 4}})
		ids := f.publish("c", 200)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := &figs{t: t, db: db, ob: f.ob}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := (i * 7) % 190
				switch i % 4 {
				case 0:
					g.set(ids[k:k+10], 3, 1, time.Hour)
				case 1:
					g.set(ids[k:k+10], 2, 1, 0)
				case 2:
					g.set(ids[k:k+10], 0, 0, -time.Second)
				case 3:
					if _, err := f.ob.Drain(context.Background(), "c"); err != nil {
						t.Error(err)
						return
					}
					ids = append(ids[:0:0], g.publish("c", 200)...)
				}
			}
		}()
		for range 30 {
			ov := f.overview()["c"]
			op := f.outboxPage("c")
			for _, c := range op.Parts {
				for _, cell := range c[1:5] {
					if strings.HasPrefix(cell, "-") {
						t.Errorf("a partition figure is negative: %q", c)
					}
				}
				if strings.HasPrefix(c[5], "-") {
					t.Errorf("a partition age is negative: %q", c)
				}
			}
			for _, a := range []string{ov.Oldest, op.Oldest} {
				if strings.HasPrefix(a, "-") {
					t.Errorf("an age is negative: %q", a)
				}
			}
		}
		close(stop)
		wg.Wait()
	})
}

// TestAttackFiguresOfDeadOnlyPartition: dead messages stay in their partition when an
// outbox shrinks (only pending ones move, and the lease rows of the partitions beyond
// the new count are dropped). core.Health lists such a partition with its dead, and so
// must the outbox page, with figures that add up to the outbox's.
func TestAttackFiguresOfDeadOnlyPartition(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFigs(t, db, map[string]core.OutboxConfig{"s": {Partitions: 2}})
		run, err := core.New(core.Config{DB: db.DB, Dialect: db.Dialect, Table: figTable, Codec: rawCodec,
			Outboxes: map[string]core.OutboxConfig{"s": {Partitions: 2, Relay: core.RelayFunc(func(context.Context, []core.Envelope) error { return nil })}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = run.Run(ctx) }()
		deadline := time.Now().Add(30 * time.Second)
		for f.health("s").Owners[run.Owner()] != 2 {
			if time.Now().After(deadline) {
				t.Fatalf("the node never held the 2 partitions: %+v", f.health("s"))
			}
			time.Sleep(50 * time.Millisecond)
		}
		cancel()
		<-done
		// Dead messages left in partition 5 by a shrink from 8 partitions to 2.
		ids := f.publish("s", 5)
		f.set(ids, 2, 1, 0)
		f.exec(`UPDATE ` + figTable + ` SET part = 5 WHERE id IN (` + strings.Join(ids2s(ids), ",") + `)`)
		op := f.outboxPage("s")
		if c, ok := op.Parts[5]; !ok || c[4] != "5" {
			t.Errorf("outbox page: %s dead, partition 5 which holds them all shows %q (rows: %v)", op.Dead.Text, c, op.Parts)
		}
		f.checkAll("s")
	})
}

// TestAttackFiguresOfManyPartitions: an outbox of 600 partitions (core allows 1024), each
// holding messages: both pages answer, with true figures.
func TestAttackFiguresOfManyPartitions(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFigs(t, db, map[string]core.OutboxConfig{"wide": {Partitions: 600}})
		ids := f.publish("wide", 1200)
		f.exec(`UPDATE ` + figTable + ` SET part = id % 600 WHERE outbox = 'wide'`)
		f.set(ids[:300], 3, 1, time.Hour)
		if m := regexp.MustCompile(`<p class="error">([^<]*)`).FindStringSubmatch(f.page("")); m != nil {
			t.Errorf("overview: %s", html.UnescapeString(m[1]))
		}
		f.checkAll("wide")
	})
}

// BenchmarkFiguresOfManyPartitions: the overview and the outbox page of an outbox of 64,
// 256 and 1024 partitions holding two messages each, against core.Health. The pages'
// cost grows with the partition count (a few index probes per partition, 32 partitions a
// statement); core.Health reads the same in milliseconds, as it reads every row.
func BenchmarkFiguresOfManyPartitions(b *testing.B) {
	for _, d := range []core.Dialect{core.Postgres, core.MySQL} {
		for _, p := range []int{64, 256, 1024} {
			b.Run(fmt.Sprintf("%s/%d", d, p), func(b *testing.B) {
				db := dbtest.Open(b, d)
				f := newFigs(b, db, map[string]core.OutboxConfig{"wide": {Partitions: p}})
				f.publish("wide", 2*p)
				f.exec(`UPDATE ` + figTable + ` SET part = id % ` + strconv.Itoa(p) + ` WHERE outbox = 'wide'`)
				for _, page := range []string{"", "outbox?i=main&o=wide"} {
					b.Run("page="+page, func(b *testing.B) {
						for b.Loop() {
							f.page(page)
						}
					})
				}
				b.Run("health", func(b *testing.B) {
					for b.Loop() {
						f.health("wide")
					}
				})
			})
		}
	}
}

// TestAttackFiguresOfARetriedDeadMessage: after an outage, the relay is still down and
// the operator retries a dead message (RetryDead: due now, with the lowest ID of its
// partition). Messages published an hour ago still wait behind it: the oldest due is an
// hour, as core.Health says, not the seconds since the retry shown as exact.
func TestAttackFiguresOfARetriedDeadMessage(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFigs(t, db, map[string]core.OutboxConfig{"r": {Partitions: 1}})
		ids := f.publish("r", 4)
		f.exec(`UPDATE ` + figTable + ` SET created_at = ` + f.at(-2*time.Hour) + `, available_at = ` + f.at(-time.Hour) + ` WHERE outbox = 'r'`)
		f.set(ids[:1], 2, 3, -2*time.Hour)
		if _, err := f.ob.RetryDead(context.Background(), "r", ids[0]); err != nil {
			t.Fatal(err)
		}
		f.checkAll("r")
	})
}

// TestAttackFiguresOfDelivered: the messages delivered in the last five minutes (kept by
// KeepFor), next to older deliveries.
func TestAttackFiguresOfDelivered(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFigs(t, db, map[string]core.OutboxConfig{"k": {Partitions: 2, Retention: core.KeepFor(time.Hour)}})
		old := f.publish("k", 7)
		f.publish("k", 30)
		for {
			res, err := f.ob.Drain(context.Background(), "k")
			if err != nil {
				t.Fatal(err)
			}
			if res.Delivered == 0 {
				break
			}
		}
		f.exec(`UPDATE ` + figTable + ` SET delivered_at = ` + f.at(-10*time.Minute) + ` WHERE id IN (` + strings.Join(ids2s(old), ",") + `)`)
		body := f.page("")
		row := rowRE.FindStringSubmatch(body)
		if row == nil {
			t.Fatalf("no row on the overview:\n%s", body)
		}
		if got := cells(row[1])[6]; got != "30" {
			t.Errorf("overview: delivered 5 min shows %q, want 30", got)
		}
		f.checkAll("k")
	})
}

// TestAttackFiguresOfWaitingAndDeadAtTheCountBound: 10000 then 10001 messages waiting for
// a retry, then as many dead, in two partitions.
func TestAttackFiguresOfWaitingAndDeadAtTheCountBound(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFigs(t, db, map[string]core.OutboxConfig{"x": {Partitions: 2}, "y": {Partitions: 1}})
		ids := f.publish("x", 10_001)
		f.publish("y", 1)
		f.set(ids[:10_000], 3, 1, time.Hour)
		f.checkAll("x")
		f.set(ids[10_000:], 3, 1, time.Hour)
		f.checkAll("x")
		if got := f.overview()["x"].Pending.Text; got != "10000+" {
			t.Errorf("overview: 10001 waiting shown %q pending, want 10000+", got)
		}
		f.set(ids[:10_000], 2, 1, 0)
		f.checkAll("x")
		f.set(ids[10_000:], 2, 1, 0)
		f.checkAll("x")
		f.checkAll("y")
		if got := f.overview()["x"].Dead.Text; got != "10000+" {
			t.Errorf("overview: 10001 dead shown %q, want 10000+", got)
		}
	})
}
