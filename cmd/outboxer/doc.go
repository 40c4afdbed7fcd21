// Command outboxer inspects, repairs and relays Outboxer outbox tables, for operators
// and for services not written in Go.
//
// Run outboxer help for the commands and outboxer <command> -h for their flags.
package main
