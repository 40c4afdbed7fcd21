package sqs_test

import (
	"context"
	"log"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/outboxer-go/outboxer/core"
	outboxsqs "github.com/outboxer-go/outboxer/sinks/sqs"
)

// A relay sending every message as a CloudEvent. In the binary content mode (the
// default) the body is the payload and the attributes are ce_ message attributes, which
// leaves room for two of a message's headers; the structured mode sends the JSON event
// as the body and carries any payload and any number of headers.
func Example_cloudEvents() {
	client := sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String("http://127.0.0.1:4566"),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test"}, nil
		}),
	})
	relay, err := outboxsqs.New(outboxsqs.Config{
		Client:      client,
		QueueURL:    "http://127.0.0.1:4566/000000000000/orders.fifo",
		CloudEvents: &outboxsqs.CloudEvents{Source: "https://shop.example.com/orders", Structured: true},
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = core.OutboxConfig{Relay: relay}
}
