module github.com/outboxer-go/outboxer/tools

go 1.26.0
