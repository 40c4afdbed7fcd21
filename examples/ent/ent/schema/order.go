// Package schema is the ent schema of the ent example and the ent adapter's tests: one Order
// entity, stored in the orders table.
package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"
)

// Order is a business row written next to an outbox message.
type Order struct {
	ent.Schema
}

// Fields of the Order.
func (Order) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("id"),
		field.String("note").MaxLen(200),
	}
}
