package inbox_test

// Attacks with consumer processes, not goroutines: each consumer is this test binary
// run again with its own database handles, so a consumer can be SIGKILLed with its
// transaction open, as a crashed program is.

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
)

const consumerProcEnv = "OUTBOXER_ATTACK_CONSUMER"

// TestAttackHelperConsumerProcess is the consumer process, run by the tests below with
// consumerProcEnv set; it does nothing otherwise. It handles the keys of OA_KEYS (comma
// separated) with the inbox, each handler writing one effect, and says on stdout what
// happened: "conn <session id>" first, then per key "claimed <key>" inside the handler
// and "done <key> <outcome>" after the commit. With OA_HOLD set, the handler waits for a
// line on stdin ("commit", or anything else to fail) before returning.
func TestAttackHelperConsumerProcess(t *testing.T) {
	if os.Getenv(consumerProcEnv) == "" {
		t.Skip("run by the process attack tests")
	}
	err := consumerProcess()
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	os.Exit(0)
}

func consumerProcess() error {
	ctx := context.Background()
	d := core.Dialect(os.Getenv("OA_DIALECT"))
	db, err := sql.Open(os.Getenv("OA_DRIVER"), os.Getenv("OA_DSN"))
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // Handle's transactions run on the session it reports
	var id int64
	switch d {
	case core.Postgres:
		err = db.QueryRow(`SELECT pg_backend_pid()`).Scan(&id)
	case core.MySQL:
		err = db.QueryRow(`SELECT CONNECTION_ID()`).Scan(&id)
	}
	if err != nil {
		return err
	}
	fmt.Println("conn", id)
	in, err := inbox.New(inbox.Config{DB: db, Dialect: d})
	if err != nil {
		return err
	}
	ins := `INSERT INTO effects (k) VALUES (?)`
	if d == core.Postgres {
		ins = `INSERT INTO effects (k) VALUES ($1)`
	}
	stdin := bufio.NewScanner(os.Stdin)
	for _, k := range strings.Split(os.Getenv("OA_KEYS"), ",") {
		o, err := in.Handle(ctx, "billing", inbox.Message{Key: k}, func(ctx context.Context, tx *sql.Tx, _ inbox.Outcome) error {
			if _, err := tx.ExecContext(ctx, ins, k); err != nil {
				return err
			}
			fmt.Println("claimed", k)
			if os.Getenv("OA_HOLD") != "" {
				if !stdin.Scan() || stdin.Text() != "commit" {
					return fmt.Errorf("told to fail")
				}
			}
			return nil
		})
		if err != nil && os.Getenv("OA_HOLD") == "" {
			return err
		}
		fmt.Println("done", k, o)
	}
	return nil
}

// consumerProc is a running consumer process.
type consumerProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // its stdout, closed at its end
}

func startConsumer(t *testing.T, db *dbtest.DB, keys []string, hold bool) *consumerProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestAttackHelperConsumerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), consumerProcEnv+"=1", "OA_DIALECT="+string(db.Dialect),
		"OA_DRIVER="+db.Driver, "OA_DSN="+db.DSN, "OA_KEYS="+strings.Join(keys, ","))
	if hold {
		cmd.Env = append(cmd.Env, "OA_HOLD=1")
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &consumerProc{cmd: cmd, stdin: stdin, lines: make(chan string, 1024)}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return p
}

// next returns the process's next line that starts with prefix (skipping the test
// framework's), failing the test when it ends first.
func (p *consumerProc) next(t *testing.T, prefix string) string {
	t.Helper()
	for l := range p.lines {
		if strings.HasPrefix(l, "error ") {
			t.Fatalf("consumer process: %s", l)
		}
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("consumer process ended before %q", prefix)
	return ""
}

func (p *consumerProc) connID(t *testing.T) int64 {
	t.Helper()
	id, err := strconv.ParseInt(strings.TrimPrefix(p.next(t, "conn "), "conn "), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestAttackConsumerProcesses: process A claims a key and holds its transaction open
// inside the handler; process B receives the same key and waits. A then commits, fails
// (rolls back), or is SIGKILLed: B skips after a commit and runs the handler otherwise.
// One effect either way.
func TestAttackConsumerProcesses(t *testing.T) {
	for _, end := range []string{"commit", "rollback", "kill"} {
		t.Run(end, func(t *testing.T) {
			dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
				setup(t, db, inbox.Config{})
				effects(t, db)
				key := core.MessageKey("", "orders", 42)
				a := startConsumer(t, db, []string{key}, true)
				a.connID(t)
				a.next(t, "claimed ")
				b := startConsumer(t, db, []string{key}, false)
				bid := b.connID(t)
				if db.Dialect != core.SQLite { // SQLite: B waits for the one writer, unseen
					waitBlocked(t, db, bid, make(chan struct{}))
				}
				switch end {
				case "commit":
					fmt.Fprintln(a.stdin, "commit")
				case "rollback":
					fmt.Fprintln(a.stdin, "rollback")
				case "kill":
					if err := a.cmd.Process.Kill(); err != nil {
						t.Fatal(err)
					}
				}
				want := "done " + key + " " + inbox.Claimed.String()
				if end == "commit" {
					want = "done " + key + " " + inbox.Duplicate.String()
				}
				if got := b.next(t, "done "); got != want {
					t.Errorf("B: %q, want %q", got, want)
				}
				if err := b.cmd.Wait(); err != nil {
					t.Errorf("B: %v", err)
				}
				if n := count(t, db, `SELECT count(*) FROM effects`); n != 1 {
					t.Errorf("%d effects, want 1", n)
				}
			})
		})
	}
}

// TestAttackConsumerProcessesManyKeys: two consumer processes handle the same 150 keys,
// one in order and one in reverse, all at once: one effect per key.
func TestAttackConsumerProcessesManyKeys(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		setup(t, db, inbox.Config{})
		effects(t, db)
		const n = 150
		keys := make([]string, n)
		for i := range keys {
			keys[i] = core.MessageKey("", "orders", int64(i))
		}
		rev := make([]string, n)
		for i, k := range keys {
			rev[n-1-i] = k
		}
		procs := []*consumerProc{startConsumer(t, db, keys, false), startConsumer(t, db, rev, false)}
		var wg sync.WaitGroup
		outcomes := make([]map[string]int, len(procs))
		for i, p := range procs {
			outcomes[i] = map[string]int{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for l := range p.lines {
					if f := strings.Fields(l); len(f) == 3 && f[0] == "done" {
						outcomes[i][f[2]]++
					} else if len(f) > 0 && f[0] == "error" {
						outcomes[i]["error"]++
						t.Errorf("consumer %d: %s", i, l)
					}
				}
			}()
		}
		deadline := time.AfterFunc(2*time.Minute, func() {
			for _, p := range procs {
				_ = p.cmd.Process.Kill()
			}
		})
		defer deadline.Stop()
		wg.Wait()
		for i, p := range procs {
			if err := p.cmd.Wait(); err != nil {
				t.Errorf("consumer %d: %v", i, err)
			}
		}
		claimed := outcomes[0]["claimed"] + outcomes[1]["claimed"]
		dups := outcomes[0]["duplicate"] + outcomes[1]["duplicate"]
		t.Logf("outcomes: %v", outcomes)
		if claimed != n || dups != n {
			t.Errorf("%d claimed and %d duplicates between the two, want %d each", claimed, dups, n)
		}
		if c := count(t, db, `SELECT count(*) FROM effects`); c != n {
			t.Errorf("%d effects, want %d", c, n)
		}
		if c := count(t, db, `SELECT count(DISTINCT k) FROM effects`); c != n {
			t.Errorf("%d distinct effects, want %d", c, n)
		}
	})
}
