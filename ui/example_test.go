package outboxerui_test

import (
	"database/sql"
	"errors"
	"fmt"
	"log"
	"net/http"

	outboxerui "github.com/outboxer-go/outboxer/ui"
)

// requireAdmin stands for the host application's own authentication.
func requireAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "admin" || p != "secret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="admin"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Mount the dashboard under a prefix of the application's own server, behind its
// authentication. db is the application's *sql.DB (pgx, go-sql-driver/mysql or a SQLite
// driver).
func ExampleNew() {
	var db *sql.DB // the application's database, opened elsewhere
	if db == nil {
		return // (this example has no database)
	}
	ui, err := outboxerui.New(outboxerui.Config{
		Instances: []outboxerui.Instance{{Name: "orders", DB: db}},
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/outbox/", requireAdmin(http.StripPrefix("/admin/outbox", ui)))
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}

// New checks the configuration before serving anything; errors name the field.
func ExampleConfigError() {
	_, err := outboxerui.New(outboxerui.Config{})
	var ce *outboxerui.ConfigError
	fmt.Println(errors.As(err, &ce), ce.Field)
	fmt.Println(err)
	// Output:
	// true Instances
	// outboxerui: invalid Instances: at least one instance is needed
}
