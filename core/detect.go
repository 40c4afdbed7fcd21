package core

import (
	"database/sql"
	"database/sql/driver"
	"fmt"
	"reflect"
	"strings"
)

// driverPackages are the packages of the database/sql drivers Outboxer knows, by the
// package path of the driver's type (db.Driver()). A path matches a prefix that it
// equals or continues with "/".
var driverPackages = []struct {
	prefix  string
	dialect Dialect
}{
	{"github.com/jackc/pgx", Postgres}, // stdlib of v4 and v5; GORM's gorm.io/driver/postgres
	{"github.com/lib/pq", Postgres},
	{"github.com/uptrace/bun/driver/pgdriver", Postgres},
	{"github.com/go-sql-driver/mysql", MySQL}, // also GORM's gorm.io/driver/mysql
	{"modernc.org/sqlite", SQLite},            // also bun's sqliteshim where modernc runs
	{"github.com/mattn/go-sqlite3", SQLite},   // GORM's gorm.io/driver/sqlite; sqliteshim with cgo
	{"github.com/glebarez/go-sqlite", SQLite}, // github.com/glebarez/sqlite (GORM)
	{"github.com/ncruces/go-sqlite3", SQLite},
}

// DetectDialect names the dialect of db from the package of its driver: pgx (its
// stdlib, as GORM's PostgreSQL driver opens it), lib/pq and bun's pgdriver are
// Postgres; modernc.org/sqlite, mattn/go-sqlite3 (GORM's SQLite driver), glebarez's
// go-sqlite and ncruces/go-sqlite3 are SQLite (bun's sqliteshim hands out modernc's or
// mattn's); go-sql-driver/mysql is MySQL. A driver whose package path names one of
// the databases ("postgres", "pgx", "sqlite", "mysql") is taken as that one, and a
// driver that wraps another (a tracing or metrics wrapper holding the real driver in
// a field) as the one it wraps. Any other driver is an error: set Config.Dialect.
func DetectDialect(db *sql.DB) (Dialect, error) {
	v := reflect.ValueOf(db.Driver())
	if d, ok := dialectOf(v, 0); ok {
		return d, nil
	}
	return "", fmt.Errorf("cannot tell the dialect of driver %s: set Config.Dialect", typeName(v))
}

// dialectOf reads the dialect of the driver v from its type, else from the drivers it
// holds in its fields, down to a few levels.
func dialectOf(v reflect.Value, depth int) (Dialect, bool) {
	for v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return "", false
		}
		v = v.Elem()
	}
	if !v.IsValid() {
		return "", false
	}
	path := v.Type().PkgPath()
	for _, k := range driverPackages {
		if path == k.prefix || strings.HasPrefix(path, k.prefix+"/") {
			return k.dialect, true
		}
	}
	switch p := strings.ToLower(path); {
	case strings.Contains(p, "pgx"), strings.Contains(p, "lib/pq"), strings.Contains(p, "postgres"), strings.Contains(p, "pgdriver"):
		return Postgres, true
	case strings.Contains(p, "sqlite"):
		return SQLite, true
	case strings.Contains(p, "mysql"), strings.Contains(p, "mariadb"):
		return MySQL, true
	}
	if v.Kind() != reflect.Struct || depth >= 3 {
		return "", false
	}
	for i := range v.NumField() {
		if f := v.Field(i); holdsDriver(f) {
			if d, ok := dialectOf(f, depth+1); ok {
				return d, true
			}
		}
	}
	return "", false
}

var (
	driverType    = reflect.TypeFor[driver.Driver]()
	connectorType = reflect.TypeFor[driver.Connector]()
)

// holdsDriver reports whether the field f holds a driver or a connector (whose
// Driver() is the wrapped driver).
func holdsDriver(f reflect.Value) bool {
	if f.Kind() == reflect.Interface {
		if f.IsNil() {
			return false
		}
		f = f.Elem()
	}
	switch f.Kind() {
	case reflect.Pointer, reflect.Struct:
		t := f.Type()
		return t.Implements(driverType) || t.Implements(connectorType) ||
			reflect.PointerTo(t).Implements(driverType) || reflect.PointerTo(t).Implements(connectorType)
	}
	return false
}

// typeName is the package path and name of the driver v's type.
func typeName(v reflect.Value) string {
	if !v.IsValid() {
		return "<nil>"
	}
	t := v.Type()
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.PkgPath() + "." + t.Name()
}
