// Package dbtime scans the time columns of the outbox tables, whatever the dialect stores:
// the engine (core) and the dashboard (ui) read them with the one Time type.
package dbtime

import (
	"fmt"
	"strconv"
	"time"
)

// Time scans a time column: a time.Time (PostgreSQL) or microseconds since the epoch
// (SQLite, and MySQL as the dialects select it: TIMESTAMPDIFF(MICROSECOND, epoch, col)),
// as an integer, a float or their text. NULL is the zero time.
type Time struct{ time.Time }

// Scan implements sql.Scanner.
func (t *Time) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		t.Time = time.Time{}
	case time.Time:
		t.Time = x
	case int64:
		t.Time = time.UnixMicro(x).UTC()
	case float64:
		t.Time = time.UnixMicro(int64(x)).UTC()
	case []byte:
		return t.parse(string(x))
	case string:
		return t.parse(x)
	default:
		return fmt.Errorf("cannot scan %T into a time", v)
	}
	return nil
}

// parse reads microseconds since the epoch written as text: an integer, or a decimal
// number (some drivers return an aggregate's value so).
func (t *Time) parse(s string) error {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		t.Time = time.UnixMicro(n).UTC()
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("cannot scan %q into a time: %w", s, err)
	}
	t.Time = time.UnixMicro(int64(f)).UTC()
	return nil
}
