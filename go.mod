module github.com/outboxer-go/outboxer

go 1.26
