module github.com/outboxer-go/outboxer/adapters/gorm

go 1.26.0

require (
	github.com/outboxer-go/outboxer v0.1.0
	gorm.io/driver/sqlite v1.6.0
	gorm.io/gorm v1.31.2
)

require (
	github.com/jinzhu/inflection v1.0.0 // indirect
	github.com/jinzhu/now v1.1.5 // indirect
	github.com/mattn/go-sqlite3 v1.14.22 // indirect
	golang.org/x/text v0.41.0 // indirect
)
