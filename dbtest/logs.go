package dbtest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
)

// LogLine is one line a Logs logger received.
type LogLine struct {
	Level   slog.Level
	Message string
	// Attrs holds the line's attributes (and the logger's), values formatted with %v.
	Attrs map[string]string
}

// Logs records the lines of a logger, for tests that assert on what the engine logs.
// Its lines also go to stderr when OUTBOXER_TEST_LOG is set.
type Logs struct {
	mu    sync.Mutex
	lines []LogLine
}

// NewLogs returns a recorder and a logger writing into it, at every level.
func NewLogs() (*Logs, *slog.Logger) {
	l := &Logs{}
	return l, slog.New(&logHandler{logs: l})
}

// Lines returns the lines at level or above whose message contains text, in order.
func (l *Logs) Lines(level slog.Level, text string) []LogLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []LogLine
	for _, line := range l.lines {
		if line.Level >= level && strings.Contains(line.Message, text) {
			out = append(out, line)
		}
	}
	return out
}

// String lists every line, for failure messages.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, line := range l.lines {
		fmt.Fprintf(&b, "%s %s %v\n", line.Level, line.Message, line.Attrs)
	}
	return b.String()
}

type logHandler struct {
	logs  *Logs
	attrs []slog.Attr
}

func (h *logHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *logHandler) Handle(_ context.Context, r slog.Record) error {
	line := LogLine{Level: r.Level, Message: r.Message, Attrs: map[string]string{}}
	for _, a := range h.attrs {
		line.Attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		line.Attrs[a.Key] = a.Value.String()
		return true
	})
	if os.Getenv("OUTBOXER_TEST_LOG") != "" {
		fmt.Fprintf(os.Stderr, "%s %s %v\n", line.Level, line.Message, line.Attrs)
	}
	h.logs.mu.Lock()
	h.logs.lines = append(h.logs.lines, line)
	h.logs.mu.Unlock()
	return nil
}

func (h *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logHandler{logs: h.logs, attrs: append(append([]slog.Attr(nil), h.attrs...), attrs...)}
}

// WithGroup keeps the attributes flat: the tests look lines up by message and key.
func (h *logHandler) WithGroup(string) slog.Handler { return h }
