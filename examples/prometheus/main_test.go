package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scrape fetches /metrics over HTTP and returns the samples by series
// (`name{labels}`, as exposed) and the text.
func scrape(t *testing.T, addr string) (map[string]float64, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s, %v", resp.Status, err)
	}
	samples := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("scrape: bad sample %q", line)
		}
		samples[line[:i]] = v
	}
	return samples, string(body)
}

// value is the sample of a metric of the orders outbox (summed over the series that
// match, e.g. over partitions), and whether there is one.
func value(samples map[string]float64, name string) (float64, bool) {
	var sum float64
	found := false
	for series, v := range samples {
		if strings.HasPrefix(series, name+"{") && strings.Contains(series, `outboxer_outbox="orders"`) {
			sum += v
			found = true
		}
	}
	return sum, found
}

// until scrapes until cond holds, failing after a bound.
func until(t *testing.T, addr, what string, cond func(map[string]float64) bool) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, text := scrape(t, addr)
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; last scrape:\n%s", what, grepOutboxer(text))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func grepOutboxer(text string) string {
	var b strings.Builder
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "outboxer_") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func is(name string, want float64) func(map[string]float64) bool {
	return func(s map[string]float64) bool { v, ok := value(s, name); return ok && v == want }
}

func TestPrometheus(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	apps := make(chan *app, 1)
	done := make(chan error, 1)
	var out strings.Builder
	go func() {
		// A free port, the health read at every scrape, no automatic orders.
		done <- run(ctx, config{addr: "127.0.0.1:0", refresh: 0}, &out, func(a *app) { apps <- a })
	}()
	var a *app
	select {
	case a = <-apps:
	case err := <-done:
		t.Fatalf("run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the example did not start")
	}
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		if want := fmt.Sprintf("metrics on http://%s/metrics\n", a.addr); out.String() != want {
			t.Errorf("output %q, want %q", out.String(), want)
		}
	}()

	// The relay owns both partitions; nothing is pending or dead.
	until(t, a.addr, "the relay to own both partitions", is("outboxer_partitions_unowned", 0))
	s, _ := scrape(t, a.addr)
	for _, name := range []string{"outboxer_outbox_pending", "outboxer_outbox_dead", "outboxer_outbox_oldest_age_seconds"} {
		if v, ok := value(s, name); !ok || v != 0 {
			t.Fatalf("%s = %v (present %v) before any traffic", name, v, ok)
		}
	}
	if v, _ := value(s, "outboxer_partitions_owned"); v != 2 {
		t.Fatalf("outboxer_partitions_owned = %v, want 2", v)
	}

	// The broker goes down: five orders pile up, fail, and wait for their retries; the
	// age of the oldest grows while they do.
	a.broker.down.Store(true)
	for range 5 {
		if err := a.publish(ctx, false); err != nil {
			t.Fatal(err)
		}
	}
	s = until(t, a.addr, "five retrying messages", is("outboxer_outbox_retrying", 5))
	if v, _ := value(s, "outboxer_outbox_pending"); v != 5 {
		t.Fatalf("backlog %v while the broker is down, want 5", v)
	}
	first, _ := value(s, "outboxer_outbox_oldest_age_seconds")
	until(t, a.addr, "the age of the backlog to grow", func(s map[string]float64) bool {
		v, _ := value(s, "outboxer_outbox_oldest_age_seconds")
		return v > first && v > 0
	})
	s = until(t, a.addr, "failed deliveries to be counted", func(s map[string]float64) bool {
		v, _ := value(s, "outboxer_messages_failed_total")
		return v >= 5
	})

	// The broker is back: the backlog drains and its age drops to 0. A poison order is
	// rejected for good: one dead message, counted and stored. The counters move when a
	// batch ends, just after its confirmation commits, so a scrape can see the table
	// drained before the last batch is counted: wait for both, then check the counts.
	a.broker.down.Store(false)
	if err := a.publish(ctx, true); err != nil {
		t.Fatal(err)
	}
	s = until(t, a.addr, "the backlog to drain and the poison to die", func(s map[string]float64) bool {
		pending, _ := value(s, "outboxer_outbox_pending")
		dead, _ := value(s, "outboxer_outbox_dead")
		age, _ := value(s, "outboxer_outbox_oldest_age_seconds")
		delivered, _ := value(s, "outboxer_messages_delivered_total")
		deadTotal, _ := value(s, "outboxer_messages_dead_total")
		return pending == 0 && dead == 1 && age == 0 && delivered >= 5 && deadTotal >= 1
	})
	if v, _ := value(s, "outboxer_messages_delivered_total"); v != 5 {
		t.Fatalf("delivered %v, want 5", v)
	}
	if v, _ := value(s, "outboxer_messages_dead_total"); v != 1 {
		t.Fatalf("dead counted %v, want 1", v)
	}
	if v, _ := value(s, "outboxer_messages_published_total"); v != 6 {
		t.Fatalf("published %v, want 6", v)
	}
	if got := a.broker.delivered.Load(); got != 5 {
		t.Fatalf("the broker got %d orders, want 5", got)
	}

	// Every metric and label the alert rules name is served under that exact name.
	_, text := scrape(t, a.addr)
	rules, err := os.ReadFile("alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var code []string // the rules without their comments
	for _, l := range strings.Split(string(rules), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			code = append(code, l)
		}
	}
	names := regexp.MustCompile(`\boutboxer_[a-z_]+\b`).FindAllString(strings.Join(code, "\n"), -1)
	if len(names) < 8 {
		t.Fatalf("alerts.yml names only %v", names)
	}
	for _, n := range names {
		metric := regexp.MustCompile(`(?m)^` + n + `[{ ]`)
		label := regexp.MustCompile(`[{,]` + n + `="`)
		if !metric.MatchString(text) && !label.MatchString(text) {
			t.Errorf("alerts.yml names %s, which /metrics does not serve", n)
		}
	}
}
