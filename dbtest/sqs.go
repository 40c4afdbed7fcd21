package dbtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// StartSQSEmulator starts the SQS emulator the repository installs with `npm ci`
// (node_modules/fauxqs, found above the working directory) on a free loopback port,
// waits until it listens, and returns its endpoint and how to stop it. Call it from
// TestMain; with an error, the tests that need it call NeedSQSEmulator.
func StartSQSEmulator() (endpoint string, stop func(), err error) {
	cli, err := findSQSEmulator()
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command("node", cli)
	// The emulator's command line logs every request to stdout whatever FAUXQS_LOGGER
	// says: drop stdout, keep errors.
	cmd.Env = append(os.Environ(), "FAUXQS_PORT="+strconv.Itoa(port), "FAUXQS_HOST=127.0.0.1", "FAUXQS_LOGGER=false")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("starting the SQS emulator: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return "http://" + addr, stop, nil
		}
		select {
		case err := <-exited:
			exited <- err
			stop()
			return "", nil, fmt.Errorf("the SQS emulator exited: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("the SQS emulator did not listen on %s within 30s", addr)
		}
	}
}

// SQSEmulator starts the SQS emulator for t alone, stopped when t ends, and returns its
// endpoint; when it cannot start, t is skipped (or failed, when CI is set).
func SQSEmulator(t testing.TB) string {
	t.Helper()
	endpoint, stop, err := StartSQSEmulator()
	NeedSQSEmulator(t, err)
	t.Cleanup(stop)
	return endpoint
}

// NeedSQSEmulator skips t when StartSQSEmulator failed with startErr, or fails it when
// CI is set.
func NeedSQSEmulator(t testing.TB, startErr error) {
	t.Helper()
	if startErr == nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("the SQS emulator is required in CI: %v", startErr)
	}
	t.Skipf("the SQS emulator is not available: %v", startErr)
}

// findSQSEmulator walks up from the working directory to the repository root looking
// for node_modules/fauxqs.
func findSQSEmulator() (string, error) {
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
		if _, err := os.Stat(filepath.Join(dir, ".git")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", fmt.Errorf("node_modules/fauxqs not found above the test directory: run `npm ci` at the repository root")
}
