package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// binary is the outboxer command, built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "outboxer-cli-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "outboxer")
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	build := exec.Command(goTool, "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build outboxer:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is what one run of the binary did.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// cli runs the binary with args and stdin, bounded in time.
func cli(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), "OUTBOXER_DSN=")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		t.Fatalf("run outboxer %v: %v", args, err)
	}
	return r
}

// mustRun runs the binary and fails the test unless it exits 0.
func mustRun(t *testing.T, args ...string) result {
	t.Helper()
	r := cli(t, "", args...)
	if r.code != 0 {
		t.Fatalf("outboxer %s: %v", strings.Join(args, " "), r)
	}
	return r
}

// wantFailure checks a failed run: its exit code, and a single line on stderr
// containing want, with no stack trace.
func wantFailure(t *testing.T, r result, code int, want string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit code %d, want %d\n%v", r.code, code, r)
	}
	msg := strings.TrimSuffix(r.stderr, "\n")
	if code == exitAborted {
		// The question comes first, on a line of its own.
		question, rest, _ := strings.Cut(msg, "\n")
		if !strings.HasSuffix(question, "[y/N] ") {
			t.Fatalf("stderr does not start with the question: %q", r.stderr)
		}
		msg = rest
	}
	if strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "outboxer") {
		t.Fatalf("stderr is not one line starting with \"outboxer\": %q", r.stderr)
	}
	if strings.Contains(msg, "goroutine ") || strings.Contains(msg, "panic") {
		t.Fatalf("stderr has a stack trace: %q", r.stderr)
	}
	if !strings.Contains(msg, want) {
		t.Fatalf("stderr %q does not say %q", msg, want)
	}
}

// cliDSN is the --dsn the CLI takes for a test database.
func cliDSN(t *testing.T, db *dbtest.DB) string {
	t.Helper()
	if db.Dialect != core.MySQL {
		return db.DSN // postgres:// with the test's search_path, or a file: URI
	}
	cfg, err := mysql.ParseDSN(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	userinfo := cfg.User
	if cfg.Passwd != "" {
		userinfo += ":" + cfg.Passwd
	}
	return fmt.Sprintf("mysql://%s@%s/%s", userinfo, cfg.Addr, cfg.DBName)
}

func decode[T any](t *testing.T, r result) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("stdout is not the JSON expected: %v\n%v", err, r)
	}
	return v
}

func compact(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("payload %q: %v", raw, err)
	}
	return b.String()
}

type event struct {
	N int `json:"n"`
}

func (event) Outbox() string { return "orders" }

// seeded is a database holding two outboxes with known contents:
//   - orders (2 partitions): 5 pending messages, then 2 dead ones (IDs in dead);
//   - emails (1 partition): 1 pending message.
type seeded struct {
	db       *dbtest.DB
	dsn      string
	orders   []int64 // pending, in ID order
	dead     []int64
	emails   []int64
	byPart   map[int]int64 // pending orders per partition
	deadPart map[int]int64 // dead orders per partition
}

func seed(t *testing.T, db *dbtest.DB) *seeded {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := core.Migrate(ctx, db.DB, core.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := &seeded{db: db, dsn: cliDSN(t, db), byPart: map[int]int64{}, deadPart: map[int]int64{}}
	// The dead messages: published first, failed permanently by a relay in manual mode.
	kill := core.RelayFunc(func(ctx context.Context, batch []core.Envelope) error {
		failed := map[int64]error{}
		for _, e := range batch {
			failed[e.ID] = core.Permanent(errors.New("rejected by the broker"))
		}
		return &core.PartialFailure{Failed: failed}
	})
	ob, err := core.New(core.Config{DB: db.DB, Manual: true, Logger: slog.New(slog.DiscardHandler), Outboxes: map[string]core.OutboxConfig{
		"orders": {Relay: kill, Partitions: 2},
		"emails": {Relay: kill},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		env, err := ob.Publish(ctx, db.DB, core.Raw{To: "orders", Type: "order.poison", Key: fmt.Sprintf("poison:%d", i), Data: []byte(`{"poison":true}`)})
		if err != nil {
			t.Fatal(err)
		}
		s.dead = append(s.dead, env.ID)
		s.deadPart[env.Partition]++
	}
	res, err := ob.Drain(ctx, "orders")
	if err != nil || res.Dead != 2 {
		t.Fatalf("drain: %+v, %v", res, err)
	}
	for i := range 5 {
		env, err := ob.Publish(ctx, db.DB, event{N: i}, core.WithOutbox("orders"), core.WithGroupKey(fmt.Sprintf("order:%d", i%3)),
			core.WithHeaders(map[string]string{"trace": fmt.Sprint(i)}))
		if err != nil {
			t.Fatal(err)
		}
		s.orders = append(s.orders, env.ID)
		s.byPart[env.Partition]++
	}
	env, err := ob.Publish(ctx, db.DB, event{N: 100}, core.WithOutbox("emails"))
	if err != nil {
		t.Fatal(err)
	}
	s.emails = append(s.emails, env.ID)
	return s
}

func TestCountsAndLists(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		s := seed(t, db)

		r := mustRun(t, "counts", "--dsn", s.dsn)
		want := "OUTBOX  PENDING  DELIVERED  DEAD\nemails  1        0          0\norders  5        0          2\n"
		if r.stdout != want {
			t.Fatalf("counts table:\n%s\nwant:\n%s", r.stdout, want)
		}
		counts := decode[[]countsJSON](t, mustRun(t, "counts", "--dsn", s.dsn, "--outbox", "orders", "--json"))
		if len(counts) != 1 || counts[0] != (countsJSON{Outbox: "orders", Pending: 5, Dead: 2}) {
			t.Fatalf("counts --json: %+v", counts)
		}

		pending := decode[[]message](t, mustRun(t, "pending", "--dsn", s.dsn, "--outbox", "orders", "--json"))
		if len(pending) != 5 {
			t.Fatalf("pending: %d messages, want 5", len(pending))
		}
		for i, m := range pending {
			if m.ID != s.orders[i] || m.State != "pending" || m.GroupKey != fmt.Sprintf("order:%d", i%3) ||
				m.Headers["trace"] != fmt.Sprint(i) || compact(t, m.Payload) != fmt.Sprintf(`{"n":%d}`, i) {
				t.Fatalf("pending[%d] = %+v (payload %s)", i, m, m.Payload)
			}
		}
		// --limit: the oldest first, and a note saying how many there are.
		r = mustRun(t, "pending", "--dsn", s.dsn, "--outbox", "orders", "--limit", "2", "--json")
		if got := decode[[]message](t, r); len(got) != 2 || got[0].ID != s.orders[0] || got[1].ID != s.orders[1] {
			t.Fatalf("pending --limit 2: %+v", got)
		}
		if !strings.Contains(r.stderr, "showing the oldest 2 of 5 pending messages") {
			t.Fatalf("pending --limit 2 says nothing about the rest: %q", r.stderr)
		}

		dead := decode[[]message](t, mustRun(t, "dead", "--dsn", s.dsn, "--json"))
		if len(dead) != 2 || dead[0].ID != s.dead[0] || dead[1].ID != s.dead[1] ||
			dead[0].State != "dead" || !strings.Contains(dead[0].LastError, "rejected by the broker") || dead[0].Attempts != 1 {
			t.Fatalf("dead: %+v", dead)
		}
		// The human table lists the dead messages with their error.
		r = mustRun(t, "dead", "--dsn", s.dsn, "--outbox", "orders")
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID ") || !strings.HasPrefix(lines[1], fmt.Sprint(s.dead[0])+" ") ||
			!strings.Contains(lines[1], "rejected by the broker") || !strings.Contains(lines[1], "order.poison") {
			t.Fatalf("dead table:\n%s", r.stdout)
		}
	})
}

func TestStatusPauseResume(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		s := seed(t, db)
		status := decode[[]statusJSON](t, mustRun(t, "status", "--dsn", s.dsn, "--json"))
		if len(status) != 2 || status[0].Outbox != "emails" || status[1].Outbox != "orders" {
			t.Fatalf("status: %+v", status)
		}
		orders := status[1]
		if orders.Backlog != 5 || orders.Dead != 2 || orders.Paused || len(orders.Partitions) != 2 ||
			orders.Retrying != 0 || orders.Scheduled != 0 || len(orders.Owners) != 0 || !slices.Equal(orders.Unowned, []int{0, 1}) {
			t.Fatalf("status of orders: %+v", orders)
		}
		if orders.OldestSeconds <= 0 || orders.OldestSeconds > 300 || orders.Problems != nil {
			t.Fatalf("status of orders: %+v", orders)
		}
		for _, p := range orders.Partitions {
			if p.Backlog != s.byPart[p.Partition] || p.Dead != s.deadPart[p.Partition] || p.Paused || p.LeaseHeld {
				t.Fatalf("partition %d: %+v; want backlog %d, dead %d", p.Partition, p, s.byPart[p.Partition], s.deadPart[p.Partition])
			}
			if p.Backlog > 0 && (p.OldestSeconds <= 0 || p.OldestSeconds > 300) {
				t.Fatalf("partition %d: oldest pending age %vs", p.Partition, p.OldestSeconds)
			}
		}

		r := mustRun(t, "pause", "--dsn", s.dsn, "--outbox", "orders")
		if r.stdout != "paused outbox \"orders\": relays stop delivering it (a batch in flight finishes); publishing goes on\n" {
			t.Fatalf("pause said %q", r.stdout)
		}
		status = decode[[]statusJSON](t, mustRun(t, "status", "--dsn", s.dsn, "--json"))
		if status[0].Paused || !status[1].Paused {
			t.Fatalf("after pause of orders: %+v", status)
		}
		for _, p := range status[1].Partitions {
			if !p.Paused {
				t.Fatalf("partition %d of orders not paused", p.Partition)
			}
		}
		// The human table shows it too.
		// A line for the outbox, then one per partition.
		r = mustRun(t, "status", "--dsn", s.dsn, "--outbox", "orders")
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != 6 || strings.Join(strings.Fields(lines[0]), " ") != "OUTBOX BACKLOG RETRYING SCHEDULED OLDEST DEAD OWNERS UNOWNED PAUSED" ||
			!strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), "orders 5 0 0 ") ||
			!strings.HasSuffix(strings.Join(strings.Fields(lines[1]), " "), " 2 0 0,1 yes") || lines[2] != "" ||
			!strings.HasPrefix(lines[3], "OUTBOX ") || !strings.HasSuffix(lines[4], "yes") || !strings.HasSuffix(lines[5], "yes") ||
			!strings.Contains(lines[4], "free") {
			t.Fatalf("status table:\n%s", r.stdout)
		}

		mustRun(t, "resume", "--dsn", s.dsn, "--outbox", "orders")
		status = decode[[]statusJSON](t, mustRun(t, "status", "--dsn", s.dsn, "--json"))
		if status[1].Paused {
			t.Fatalf("after resume: %+v", status[1])
		}
	})
}

func TestRetryAndDiscard(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		s := seed(t, db)
		counts := func() countsJSON {
			return decode[[]countsJSON](t, mustRun(t, "counts", "--dsn", s.dsn, "--outbox", "orders", "--json"))[0]
		}
		before := countsJSON{Outbox: "orders", Pending: 5, Dead: 2}

		// No --yes, stdin not a terminal and empty: refused, nothing changed.
		r := cli(t, "", "retry", "--dsn", s.dsn, "--outbox", "orders", "--all")
		wantFailure(t, r, exitAborted, "pass --yes")
		if c := counts(); c != before {
			t.Fatalf("refused retry changed counts: %+v", c)
		}
		// An answer of no: refused.
		r = cli(t, "no\n", "discard", "--dsn", s.dsn, "--outbox", "orders", fmt.Sprint(s.orders[0]))
		wantFailure(t, r, exitAborted, "nothing was changed")
		if c := counts(); c != before {
			t.Fatalf("refused discard changed counts: %+v", c)
		}

		// An answer of yes on stdin: the dead messages are retried, by ID.
		r = cli(t, "yes\n", "retry", "--dsn", s.dsn, "--outbox", "orders", "--all")
		ids := idRanges(s.dead)
		if r.code != 0 || r.stdout != fmt.Sprintf("retried 2 dead messages of outbox \"orders\": ids %s\n", ids) ||
			!strings.Contains(r.stderr, fmt.Sprintf("Retry 2 dead messages of outbox \"orders\" (ids %s)? [y/N]", ids)) {
			t.Fatalf("retry --all: %v", r)
		}
		if c := counts(); c != (countsJSON{Outbox: "orders", Pending: 7}) {
			t.Fatalf("after retry: %+v", c)
		}
		// Nothing left to retry.
		r = mustRun(t, "retry", "--dsn", s.dsn, "--outbox", "orders", "--all", "--yes")
		if r.stdout != "nothing changed: no dead message to retry in outbox \"orders\"\n" {
			t.Fatalf("second retry: %v", r)
		}

		// Discard two messages by ID with --yes, plus one that is not in the outbox.
		missing := s.emails[0] // exists, but in another outbox
		res := decode[changeJSON](t, mustRun(t, "discard", "--dsn", s.dsn, "--outbox", "orders", "--yes", "--json",
			fmt.Sprint(s.orders[1]), fmt.Sprint(s.dead[0]), fmt.Sprint(missing)))
		if res.Count != 2 || len(res.IDs) != 2 || res.IDs[0] != min(s.orders[1], s.dead[0]) || res.IDs[1] != max(s.orders[1], s.dead[0]) ||
			len(res.NotFound) != 1 || res.NotFound[0] != missing {
			t.Fatalf("discard --json: %+v", res)
		}
		if c := counts(); c != (countsJSON{Outbox: "orders", Pending: 5}) {
			t.Fatalf("after discard: %+v", c)
		}
		if c := decode[[]countsJSON](t, mustRun(t, "counts", "--dsn", s.dsn, "--outbox", "emails", "--json"))[0]; c.Pending != 1 {
			t.Fatalf("discard touched another outbox: %+v", c)
		}
		pending := decode[[]message](t, mustRun(t, "pending", "--dsn", s.dsn, "--outbox", "orders", "--json"))
		for _, m := range pending {
			if m.ID == s.orders[1] || m.ID == s.dead[0] {
				t.Fatalf("message %d is still there after discard", m.ID)
			}
		}
	})
}

func TestBadInput(t *testing.T) {
	t.Run("no database needed", func(t *testing.T) {
		wantFailure(t, cli(t, "", "counts"), exitUsage, "--dsn is required")
		wantFailure(t, cli(t, "", "counts", "--dsn", "postgres://u@127.0.0.1:notaport/db"), exitUsage, "malformed PostgreSQL DSN")
		wantFailure(t, cli(t, "", "counts", "--dsn", "mysql://root@/"), exitUsage, "malformed MySQL DSN")
		wantFailure(t, cli(t, "", "counts", "--dsn", "redis://127.0.0.1"), exitUsage, `unsupported scheme "redis"`)
		wantFailure(t, cli(t, "", "counts", "--dsn", filepath.Join(t.TempDir(), "typo.db")), exitRuntime, "does not exist")
		wantFailure(t, cli(t, "", "frobnicate"), exitUsage, `unknown command "frobnicate"`)
		wantFailure(t, cli(t, "", "counts", "--nope"), exitUsage, "flag provided but not defined: -nope")
		wantFailure(t, cli(t, "", "retry", "--dsn", "x.db", "--outbox", "a"), exitUsage, "give message IDs, or --all")
		wantFailure(t, cli(t, "", "discard", "--dsn", "x.db", "--outbox", "a", "12x"), exitUsage, `"12x" is not a message ID`)
		wantFailure(t, cli(t, "", "pending", "--dsn", "x.db", "--limit", "0"), exitUsage, "--limit must be at least 1")
		wantFailure(t, cli(t, "", "status", "--dsn", "x.db", "--schema", "s"), exitUsage, "--schema is for PostgreSQL only")
	})
	t.Run("unreachable", func(t *testing.T) {
		wantFailure(t, cli(t, "", "status", "--dsn", "postgres://postgres@127.0.0.1:1/test"), exitRuntime, "cannot reach the PostgreSQL database")
		wantFailure(t, cli(t, "", "status", "--dsn", "mysql://root:secret@127.0.0.1:1/test"), exitRuntime, "cannot reach the MySQL database")
		r := cli(t, "", "status", "--dsn", "postgres://postgres:secret@127.0.0.1:1/test")
		if strings.Contains(r.stderr, "secret") {
			t.Fatalf("the password is in the error: %q", r.stderr)
		}
	})
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		dsn := cliDSN(t, db)
		// No tables yet: say so, and how to create them.
		if err := db.PingContext(context.Background()); err != nil { // creates the SQLite file
			t.Fatal(err)
		}
		wantFailure(t, cli(t, "", "counts", "--dsn", dsn), exitRuntime, "outboxer migrate up")

		s := seed(t, db)
		ctx := context.Background()
		if _, err := db.ExecContext(ctx, `CREATE TABLE y (id INTEGER)`); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO y (id) VALUES (42)`); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"counts", "--table", `x"; DROP TABLE y;--`},
			{"discard", "--table", "x`; DROP TABLE y;--", "--outbox", "orders", "--yes", "1"},
			{"migrate", "down", "--table", `x"; DROP TABLE y;--`, "--yes"},
			{"status", "--schema", `public"; DROP TABLE y;--`},
		} {
			r := cli(t, "", append(args, "--dsn", s.dsn)...)
			wantFailure(t, r, exitUsage, "invalid --")
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM y WHERE id = 42`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("table y after the bad names: %d rows, %v", n, err)
		}
		if c := decode[[]countsJSON](t, mustRun(t, "counts", "--dsn", s.dsn, "--outbox", "orders", "--json"))[0]; c.Pending != 5 || c.Dead != 2 {
			t.Fatalf("the bad names changed messages: %+v", c)
		}

		// Unknown outboxes: one line, exit 1, for every command that names one.
		for _, args := range [][]string{
			{"counts", "--outbox", "nope"},
			{"pending", "--outbox", "orders", "--outbox", "nope"},
			{"dead", "--outbox", "nope"},
			{"status", "--outbox", "nope"},
			{"pause", "--outbox", "nope"},
			{"resume", "--outbox", "nope"},
			{"retry", "--outbox", "nope", "--all", "--yes"},
			{"discard", "--outbox", "nope", "--yes", "1"},
		} {
			r := cli(t, "", append(args, "--dsn", s.dsn)...)
			wantFailure(t, r, exitRuntime, `unknown outbox "nope"`)
			if !strings.Contains(r.stderr, "outboxes there: emails, orders") {
				t.Fatalf("%v: the error does not list the outboxes present: %q", args, r.stderr)
			}
		}
		// Pause of an unknown outbox created nothing.
		status := decode[[]statusJSON](t, mustRun(t, "status", "--dsn", s.dsn, "--json"))
		if len(status) != 2 {
			t.Fatalf("outboxes after the unknown ones: %+v", status)
		}
	})
}

func TestMigrate(t *testing.T) {
	for _, d := range []string{"postgres", "mysql", "sqlite"} {
		r := mustRun(t, "migrate", "up", "--print-sql", "--dialect", d, "--table", "events")
		if !strings.Contains(r.stdout, "CREATE TABLE IF NOT EXISTS") || !strings.Contains(r.stdout, "events_leases") {
			t.Fatalf("%s up SQL:\n%s", d, r.stdout)
		}
		r = mustRun(t, "migrate", "down", "--print-sql", "--dialect", d, "--table", "events")
		if !strings.Contains(r.stdout, "DROP TABLE IF EXISTS") || strings.Contains(r.stdout, "CREATE") {
			t.Fatalf("%s down SQL:\n%s", d, r.stdout)
		}
	}
	wantFailure(t, cli(t, "", "migrate", "--print-sql"), exitUsage, "--print-sql needs --dialect or --dsn")
	wantFailure(t, cli(t, "", "migrate", "sideways", "--dsn", "x.db"), exitUsage, "want migrate up or migrate down")

	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		dsn := cliDSN(t, db)
		ctx := context.Background()
		tableCount := func() int {
			var n int
			q := `SELECT COUNT(*) FROM events`
			if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil {
				return -1
			}
			return n
		}
		r := mustRun(t, "migrate", "up", "--dsn", dsn, "--table", "events")
		if !strings.HasPrefix(r.stdout, "migrated up: tables events and events_leases") {
			t.Fatalf("migrate up: %v", r)
		}
		mustRun(t, "migrate", "--dsn", dsn, "--table", "events") // idempotent; up by default
		if tableCount() != 0 {
			t.Fatal("events table missing after migrate up")
		}
		// The CLI sees the new table (and no outbox in it).
		if r := mustRun(t, "counts", "--dsn", dsn, "--table", "events", "--json"); strings.TrimSpace(r.stdout) != "[]" {
			t.Fatalf("counts on an empty table: %v", r)
		}
		// Down without --yes and without an answer: refused.
		wantFailure(t, cli(t, "", "migrate", "down", "--dsn", dsn, "--table", "events"), exitAborted, "pass --yes")
		if tableCount() != 0 {
			t.Fatal("refused migrate down dropped the table")
		}
		r = mustRun(t, "migrate", "down", "--dsn", dsn, "--table", "events", "--yes")
		if !strings.HasPrefix(r.stdout, "migrated down: dropped tables events and events_leases") || tableCount() != -1 {
			t.Fatalf("migrate down: %v (table rows %d)", r, tableCount())
		}
	})

	t.Run("postgres schema", func(t *testing.T) {
		db := dbtest.Postgres(t)
		schema := db.Schema + "_x"
		t.Cleanup(func() { db.ExecContext(context.Background(), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`) })
		mustRun(t, "migrate", "up", "--dsn", db.DSN, "--schema", schema)
		var n int
		if err := db.QueryRowContext(context.Background(), `SELECT COUNT(*) FROM `+schema+`.outboxer_messages_leases`).Scan(&n); err != nil {
			t.Fatalf("tables not in schema %s: %v", schema, err)
		}
		if r := mustRun(t, "counts", "--dsn", db.DSN, "--schema", schema, "--json"); strings.TrimSpace(r.stdout) != "[]" {
			t.Fatalf("counts in schema: %v", r)
		}
	})

	t.Run("sqlite plain path", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "app.db")
		mustRun(t, "migrate", "up", "--dsn", path)
		db, err := sql.Open("sqlite", dbtest.SQLiteDSN(path))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var mode string
		if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
			t.Fatalf("journal mode %q, %v; want wal", mode, err)
		}
		if r := mustRun(t, "counts", "--dsn", path, "--json"); strings.TrimSpace(r.stdout) != "[]" {
			t.Fatalf("counts: %v", r)
		}
	})
}

// ageMessages moves the creation and due time of every message an hour into the past.
func ageMessages(t *testing.T, db *dbtest.DB) {
	t.Helper()
	back := map[core.Dialect]string{
		core.Postgres: "%s - interval '1 hour'",
		core.MySQL:    "%s - INTERVAL 1 HOUR",
		core.SQLite:   "%s - 3600000000",
	}[db.Dialect]
	q := fmt.Sprintf(`UPDATE outboxer_messages SET created_at = %s, available_at = %s`,
		fmt.Sprintf(back, "created_at"), fmt.Sprintf(back, "available_at"))
	if _, err := db.ExecContext(context.Background(), q); err != nil {
		t.Fatalf("age messages: %v", err)
	}
}

func TestStatusCheck(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		s := seed(t, db)
		ageMessages(t, db)

		// The defaults: dead messages and partitions nobody delivers are problems, one a
		// line on stderr, exit code 4; the status is printed all the same.
		r := cli(t, "", "status", "--dsn", s.dsn, "--check")
		if r.code != exitUnhealthy {
			t.Fatalf("status --check: %v", r)
		}
		problems := strings.Split(strings.TrimSpace(r.stderr), "\n")
		want := []string{
			`outboxer status: unhealthy: outboxer: partitions without an owner: outbox "emails": no live owner for partition 0`,
			`outboxer status: unhealthy: outboxer: dead messages: outbox "orders": 2 dead (limit 0)`,
			`outboxer status: unhealthy: outboxer: partitions without an owner: outbox "orders": no live owner for partition 0, 1`,
		}
		if !slices.Equal(problems, want) {
			t.Fatalf("status --check said:\n%s\nwant:\n%s", r.stderr, strings.Join(want, "\n"))
		}
		if !strings.HasPrefix(r.stdout, "OUTBOX ") {
			t.Fatalf("status --check printed no table:\n%s", r.stdout)
		}

		// The lag: the messages waited an hour.
		r = cli(t, "", "status", "--dsn", s.dsn, "--check", "--max-age", "30m", "--max-dead", "-1", "--allow-unowned", "--outbox", "orders")
		wantFailure(t, r, exitUnhealthy, `outboxer: delivery lags: outbox "orders": the oldest due message has waited 1h`)
		mustRun(t, "status", "--dsn", s.dsn, "--check", "--max-age", "2h", "--max-dead", "2", "--allow-unowned")

		// JSON names the problems per outbox.
		r = cli(t, "", "status", "--dsn", s.dsn, "--json", "--check", "--max-pending", "4", "--allow-unowned")
		if r.code != exitUnhealthy {
			t.Fatalf("status --json --check: %v", r)
		}
		st := decode[[]statusJSON](t, r)
		if len(st) != 2 || st[0].Problems != nil || len(st[1].Problems) != 2 ||
			st[1].Problems[0] != `outboxer: backlog too large: outbox "orders": 5 messages pending (limit 4)` ||
			st[1].Problems[1] != `outboxer: dead messages: outbox "orders": 2 dead (limit 0)` {
			t.Fatalf("status --json --check: %+v", st)
		}
		if st[1].OldestSeconds < 3600 || st[1].OldestSeconds > 4000 {
			t.Fatalf("oldest pending age %vs, want an hour", st[1].OldestSeconds)
		}

		// A paused outbox is a problem only when asked.
		mustRun(t, "pause", "--dsn", s.dsn, "--outbox", "emails")
		mustRun(t, "status", "--dsn", s.dsn, "--check", "--max-dead", "-1", "--allow-unowned")
		r = cli(t, "", "status", "--dsn", s.dsn, "--check", "--max-dead", "-1", "--allow-unowned", "--fail-paused")
		wantFailure(t, r, exitUnhealthy, `outboxer: outbox paused: outbox "emails": paused`)

		// Limits without --check are a usage error; nothing is read.
		wantFailure(t, cli(t, "", "status", "--dsn", s.dsn, "--max-age", "5m"), exitUsage, "--max-age applies only with --check")
	})
}
