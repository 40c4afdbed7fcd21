module github.com/outboxer-go/outboxer/adapters/ent

go 1.26.0

require (
	entgo.io/ent v0.14.5
	github.com/mattn/go-sqlite3 v1.14.17
	github.com/outboxer-go/outboxer v0.1.0
)

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/stretchr/testify v1.11.1 // indirect
)
