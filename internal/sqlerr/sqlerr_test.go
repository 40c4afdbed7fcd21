package sqlerr

import (
	"errors"
	"fmt"
	"testing"
)

// Errors shaped as the drivers' own (the real ones are checked against the databases
// in the adapters' test modules, through adaptertest/drivercheck).

type pgError struct{ code string } // pgx's *pgconn.PgError, lib/pq's *pq.Error

func (e *pgError) Error() string    { return "pg: " + e.code }
func (e *pgError) SQLState() string { return e.code }

type fieldError struct{ m map[byte]string } // bun pgdriver's Error, a value

func (e fieldError) Error() string       { return "pgdriver" }
func (e fieldError) Field(k byte) string { return e.m[k] }

type mysqlError struct { // go-sql-driver/mysql's *MySQLError
	Number   uint16
	SQLState [5]byte
	Message  string
}

func (e *mysqlError) Error() string { return "mysql" }

type mattnError struct { // mattn/go-sqlite3's Error, a value
	Code         int
	ExtendedCode int
}

func (e mattnError) Error() string { return "mattn" }

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want Class
	}{
		{nil, Other},
		{errors.New("boom"), Other},
		{&pgError{"40001"}, Serialization},
		{&pgError{"40P01"}, Deadlock},
		{&pgError{"42P01"}, MissingTable},
		{&pgError{"3F000"}, MissingTable},
		{&pgError{"55P03"}, LockTimeout},
		{&pgError{"23505"}, Unique},
		{&pgError{"22P02"}, Other},
		{fieldError{map[byte]string{'C': "40001"}}, Serialization},
		{fieldError{map[byte]string{'C': "40P01"}}, Deadlock},
		{&mysqlError{Number: 1213, SQLState: [5]byte{'4', '0', '0', '0', '1'}}, Deadlock},
		{&mysqlError{Number: 1644, SQLState: [5]byte{'4', '0', '0', '0', '1'}}, Serialization},
		{&mysqlError{Number: 1205, SQLState: [5]byte{'H', 'Y', '0', '0', '0'}}, LockTimeout},
		{&mysqlError{Number: 1146, SQLState: [5]byte{'4', '2', 'S', '0', '2'}}, MissingTable},
		{&mysqlError{Number: 1062, SQLState: [5]byte{'2', '3', '0', '0', '0'}}, Unique},
		{mattnError{Code: 5, ExtendedCode: 5}, Busy},
		{mattnError{Code: 6, ExtendedCode: 262}, Busy},
		{mattnError{Code: 19, ExtendedCode: 2067}, Unique},
		{mattnError{Code: 19, ExtendedCode: 1299}, Other}, // NOT NULL
		// Without a driver error, the text.
		{errors.New("Error 1146 (42S02): Table 'x.y' doesn't exist"), MissingTable},
		{errors.New(`ERROR: relation "outboxer_messages" does not exist (SQLSTATE 42P01)`), MissingTable},
		{errors.New("no such table: outboxer_messages"), MissingTable},
		{errors.New("Error 1205 (HY000): Lock wait timeout exceeded"), LockTimeout},
	} {
		if got := Classify(c.err); got != c.want {
			t.Errorf("Classify(%#v) = %s, want %s", c.err, got, c.want)
		}
		// Wrapped, and joined after an unrelated error: the same class.
		if c.err != nil {
			if got := Classify(fmt.Errorf("outer: %w", errors.Join(errors.New("other"), c.err))); got != c.want {
				t.Errorf("Classify(wrapped %#v) = %s, want %s", c.err, got, c.want)
			}
		}
	}
}

func TestSQLState(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errors.New("ERROR (SQLSTATE 22P02)"), ""},
		{fmt.Errorf("w: %w", &pgError{"22P02"}), "22P02"},
		{fmt.Errorf("w: %w", fieldError{map[byte]string{'C': "23502"}}), "23502"},
		{&mysqlError{Number: 1062, SQLState: [5]byte{'2', '3', '0', '0', '0'}}, "23000"},
		{mattnError{Code: 19, ExtendedCode: 2067}, ""},
	} {
		if got := SQLState(c.err); got != c.want {
			t.Errorf("SQLState(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

func TestRetryable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&pgError{"40001"}, true},
		{&pgError{"40P01"}, true},
		{fieldError{map[byte]string{'C': "40001"}}, true},
		{&mysqlError{Number: 1213}, true},
		{&pgError{"55P03"}, false},
		{&mysqlError{Number: 1205}, false},
		{mattnError{Code: 5, ExtendedCode: 5}, false},
	} {
		if got := Retryable(c.err); got != c.want {
			t.Errorf("Retryable(%#v) = %v, want %v", c.err, got, c.want)
		}
	}
}
