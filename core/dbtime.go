package core

import (
	"fmt"
	"strconv"
	"time"
)

// dbTime scans a time column: a time.Time (PostgreSQL) or microseconds since the epoch
// (SQLite, MySQL), as the dialect's TimeCol selects it.
type dbTime struct{ time.Time }

func (t *dbTime) Scan(v any) error {
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
		return fmt.Errorf("outboxer: cannot scan %T into a time", v)
	}
	return nil
}

func (t *dbTime) parse(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("outboxer: cannot scan %q into a time", s)
	}
	t.Time = time.UnixMicro(n).UTC()
	return nil
}
