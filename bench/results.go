package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"
)

// figure is one measured quantity of one system, with a value per round.
type figure struct {
	Workload string    `json:"workload"`
	System   string    `json:"system"`
	Variant  string    `json:"variant,omitempty"`
	Metric   string    `json:"metric"`
	Backlog  int       `json:"backlog,omitempty"`
	Batch    int       `json:"batch,omitempty"`
	Values   []float64 `json:"values"`
	Median   float64   `json:"median"`
	Min      float64   `json:"min"`
	Max      float64   `json:"max"`
	Notes    []string  `json:"notes,omitempty"`
}

func (f *figure) noteIf(n string) {
	if n != "" && !slices.Contains(f.Notes, n) {
		f.Notes = append(f.Notes, n)
	}
}

type machineInfo struct {
	CPU        string            `json:"cpu"`
	Cores      int               `json:"cores"`
	MemoryGiB  float64           `json:"memory_gib"`
	OS         string            `json:"os"`
	Kernel     string            `json:"kernel"`
	Go         string            `json:"go"`
	PostgreSQL string            `json:"postgresql"`
	Autovacuum string            `json:"autovacuum,omitempty"`
	SQLite     string            `json:"sqlite"`
	Modules    map[string]string `json:"modules"`
	LoadBefore string            `json:"load_before"`
	LoadAfter  string            `json:"load_after,omitempty"`
}

type steadyEntry struct {
	System string `json:"system"`
	steadyResult
}

type results struct {
	Command        string        `json:"command"`
	Started        time.Time     `json:"started"`
	Elapsed        string        `json:"elapsed"`
	Quick          bool          `json:"quick"`
	Rounds         int           `json:"rounds"`
	Machine        machineInfo   `json:"machine"`
	RiverWorkers   int           `json:"river_best_workers,omitempty"`
	SteadyRateRule string        `json:"steady_rate_rule,omitempty"`
	Figures        []*figure     `json:"figures"`
	Steady         []steadyEntry `json:"steady,omitempty"`

	analysis string // bench/analysis.md, appended to the report when present
}

// readAnalysis loads the engineers' reading of the figures, kept beside the JSON file.
func (r *results) readAnalysis(c config) {
	if r.Quick {
		return // it reads a full run's figures
	}
	if b, err := os.ReadFile(filepath.Join(filepath.Dir(c.jsonPath), "analysis.md")); err == nil {
		r.analysis = string(b)
	}
}

func newResults(c config, args []string) *results {
	cmd := "cd bench && go run ."
	if len(args) > 0 {
		cmd += " " + strings.Join(args, " ")
	}
	return &results{Command: cmd, Started: time.Now().UTC(), Quick: c.quick, Rounds: c.rounds}
}

func (r *results) add(workload, system, variant, metric string, backlog, batch int, v float64) *figure {
	f := r.find(workload, system, variant, metric, batch)
	if f == nil {
		f = &figure{Workload: workload, System: system, Variant: variant, Metric: metric, Backlog: backlog, Batch: batch}
		r.Figures = append(r.Figures, f)
	}
	f.Values = append(f.Values, v)
	s := slices.Sorted(slices.Values(f.Values))
	f.Min, f.Max = s[0], s[len(s)-1]
	if n := len(s); n%2 == 1 {
		f.Median = s[n/2]
	} else {
		f.Median = (s[n/2-1] + s[n/2]) / 2
	}
	return f
}

func (r *results) find(workload, system, variant, metric string, batch int) *figure {
	for _, f := range r.Figures {
		if f.Workload == workload && f.System == system && f.Variant == variant && f.Metric == metric && f.Batch == batch {
			return f
		}
	}
	return nil
}

func (r *results) findPrefix(workload, system, variantSuffix string) *figure {
	for _, f := range r.Figures {
		if f.Workload == workload && f.System == system && strings.HasSuffix(f.Variant, variantSuffix) {
			return f
		}
	}
	return nil
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

func machine(ctx context.Context, admin *sql.DB) machineInfo {
	m := machineInfo{Cores: runtime.NumCPU(), Go: runtime.Version(), Modules: map[string]string{}, LoadBefore: loadavg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseFloat(f[1], 64)
				m.MemoryGiB = float64(int(kb/1024/1024*10)) / 10
			}
		}
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
				m.OS = strings.Trim(v, `"`)
			}
		}
	}
	if out, err := exec.Command("uname", "-sr").Output(); err == nil {
		m.Kernel = strings.TrimSpace(string(out))
	}
	_ = admin.QueryRowContext(ctx, `SHOW server_version`).Scan(&m.PostgreSQL)
	_ = admin.QueryRowContext(ctx, `SHOW autovacuum`).Scan(&m.Autovacuum)
	if e, err := newSQLite(); err == nil {
		_ = e.db.QueryRowContext(ctx, `SELECT sqlite_version()`).Scan(&m.SQLite)
		e.close()
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/ThreeDotsLabs/watermill", "github.com/ThreeDotsLabs/watermill-sql/v4",
				"github.com/riverqueue/river", "github.com/riverqueue/river/riverdriver/riverpgxv5",
				"github.com/jackc/pgx/v5", "modernc.org/sqlite":
				m.Modules[d.Path] = d.Version
			}
		}
	}
	return m
}

func (r *results) write(c config, elapsed time.Duration) error {
	r.Elapsed = elapsed.Round(time.Second).String()
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.jsonPath, append(b, '\n'), 0o644); err != nil {
		return err
	}
	r.readAnalysis(c)
	return os.WriteFile(c.mdPath, []byte(r.markdown()), 0o644)
}

func fmtRate(v float64) string {
	s := strconv.FormatFloat(v, 'f', 0, 64)
	// thousands separators
	n := len(s)
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (n-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	return b.String()
}

func fmtMs(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func (f *figure) spread(format func(float64) string) string {
	if f == nil {
		return "–"
	}
	if len(f.Values) == 1 {
		return format(f.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", format(f.Median), format(f.Min), format(f.Max))
}

func ratio(a, b *figure) string {
	if a == nil || b == nil || b.Median == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a.Median/b.Median)
}

func kb(v int64) string { return fmtRate(float64(v)/1024) + " kB" }
