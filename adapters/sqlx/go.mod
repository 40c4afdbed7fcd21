module github.com/outboxer-go/outboxer/adapters/sqlx

go 1.26.0

require (
	github.com/jmoiron/sqlx v1.4.0
	github.com/mattn/go-sqlite3 v1.14.22
	github.com/outboxer-go/outboxer v0.1.0
)

require github.com/go-sql-driver/mysql v1.10.1 // indirect
