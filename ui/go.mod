module github.com/outboxer-go/outboxer/ui

go 1.26.0

require github.com/outboxer-go/outboxer v0.1.0
