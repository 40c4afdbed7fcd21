module github.com/outboxer-go/outboxer/sinks/watermill

go 1.26.0

require (
	github.com/ThreeDotsLabs/watermill v1.5.1
	github.com/google/uuid v1.6.0
	github.com/outboxer-go/outboxer v0.1.0
)

require github.com/stretchr/testify v1.12.1 // indirect

require (
	github.com/lithammer/shortuuid/v3 v3.0.7 // indirect
	github.com/oklog/ulid v1.3.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
)
