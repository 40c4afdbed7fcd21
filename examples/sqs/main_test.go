package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestSQSExample starts the SQS emulator the project's tests use (installed by `npm ci`
// at the repository root) on a free loopback port, runs the program against it and checks
// what it received: each event once, order 1's two events in sequence.
func TestSQSExample(t *testing.T) {
	endpoint := startEmulator(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out, endpoint); err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	want := `delivered 3, failed 0, dead 0
id 1 group order:1 type orders.OrderPlaced body {"order_id":1,"total":25.5}
id 2 group order:1 type orders.OrderPlaced body {"order_id":1,"total":30}
id 3 group order:2 type orders.OrderPlaced body {"order_id":2,"total":12.75}
`
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}

// startEmulator runs the emulator until the test ends and returns its address. Without
// node or node_modules/fauxqs the test is skipped, or fails when CI is set.
func startEmulator(t *testing.T) string {
	t.Helper()
	cli, err := findEmulator()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the SQS emulator is required in CI: %v", err)
		}
		t.Skipf("the SQS emulator is not available: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()

	cmd := exec.Command("node", cli)
	// The emulator logs every request to stdout: drop it, keep errors.
	cmd.Env = append(os.Environ(), "FAUXQS_PORT="+strconv.Itoa(port), "FAUXQS_HOST=127.0.0.1", "FAUXQS_LOGGER=false")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the SQS emulator: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return "http://" + addr
		}
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			t.Fatalf("the SQS emulator exited: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the SQS emulator did not listen on %s within 30s", addr)
		}
	}
}

// findEmulator looks for node_modules/fauxqs in the directories above the test's, up to
// the repository root.
func findEmulator() (string, error) {
	if _, err := exec.LookPath("node"); err != nil {
		return "", fmt.Errorf("node is not installed: %w", err)
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		cli := filepath.Join(dir, "node_modules", "fauxqs", "dist", "cli.js")
		if _, err := os.Stat(cli); err == nil {
			return cli, nil
		}
		parent := filepath.Dir(dir)
		if _, err := os.Stat(filepath.Join(dir, ".git")); err == nil || parent == dir {
			return "", fmt.Errorf("node_modules/fauxqs not found above the test directory: run `npm ci` at the repository root")
		}
		dir = parent
	}
}
