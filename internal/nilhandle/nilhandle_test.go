package nilhandle

import (
	"database/sql"
	"testing"
)

func TestIs(t *testing.T) {
	var db *sql.DB
	var m map[string]int
	var f func()
	for _, v := range []any{nil, db, m, f, (*int)(nil)} {
		if !Is(v) {
			t.Errorf("Is(%#v) = false, want true", v)
		}
	}
	for _, v := range []any{&sql.DB{}, 0, "", struct{}{}, map[string]int{}} {
		if Is(v) {
			t.Errorf("Is(%#v) = true, want false", v)
		}
	}
}
