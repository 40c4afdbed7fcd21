package dbtest_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
)

// child is this test binary run again as a relay process: an init function or TestMain
// turns it into one when the environment it was started with says so. It keeps every
// line the process prints.
type child struct {
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{} // closed once the process has exited and its output is read
	err     error         // how it exited, once done is closed

	mu    sync.Mutex
	lines []string
	more  chan struct{} // closed, and replaced, when a line arrives or the output ends
	next  int           // where waitLine goes on looking
}

// startChild starts the process with env and hands each line it prints to onLine (if not
// nil), in order, before keeping it. The test's cleanup kills the process if it is still
// running, resuming it first if it was frozen.
func startChild(t testing.TB, env []string, onLine func(string)) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = env
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, started: time.Now(), done: make(chan struct{}), more: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			l := sc.Text()
			if onLine != nil {
				onLine(l)
			}
			c.mu.Lock()
			c.lines = append(c.lines, l)
			close(c.more)
			c.more = make(chan struct{})
			c.mu.Unlock()
		}
		c.err = cmd.Wait()
		close(c.done)
		c.mu.Lock()
		close(c.more)
		c.mu.Unlock()
	}()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = cmd.Process.Signal(syscall.SIGCONT)
			c.kill()
		}
	})
	return c
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// exited reports whether the process has exited.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// waitLine waits for a line starting with prefix, among those after the last line it
// returned, and returns it.
func (c *child) waitLine(t testing.TB, prefix string, within time.Duration) string {
	t.Helper()
	timeout := time.After(within)
	for {
		ended := c.exited() // before reading the lines: by then it printed them all
		c.mu.Lock()
		for c.next < len(c.lines) {
			l := c.lines[c.next]
			c.next++
			if strings.HasPrefix(l, prefix) {
				c.mu.Unlock()
				return l
			}
		}
		more := c.more
		c.mu.Unlock()
		if ended {
			t.Fatalf("relay process %d ended (%v) before printing %q", c.pid(), c.err, prefix)
		}
		select {
		case <-more:
		case <-timeout:
			t.Fatalf("relay process %d did not print %q within %v", c.pid(), prefix, within)
		}
	}
}

// stop ends the process with SIGTERM (resuming it first if it was frozen), checks that it
// exits cleanly, and returns how long it took to exit.
func (c *child) stop(t testing.TB) time.Duration {
	t.Helper()
	began := time.Now()
	_ = c.cmd.Process.Signal(syscall.SIGCONT)
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		if c.err != nil {
			t.Errorf("relay process %d exited with %v", c.pid(), c.err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("relay process %d did not stop within 60s of SIGTERM", c.pid())
	}
	return time.Since(began)
}

// kill ends the process with SIGKILL and waits until it has exited.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
}

// The relay process's side.

var sayMu sync.Mutex

// say prints a line for the test that started this relay process, whole even when
// goroutines print at once.
func say(format string, args ...any) {
	sayMu.Lock()
	defer sayMu.Unlock()
	fmt.Printf(format+"\n", args...)
}

// runUntilTerm runs ob until SIGTERM or SIGINT, and returns the relay process's exit code.
func runUntilTerm(ob *core.Outboxer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := ob.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
