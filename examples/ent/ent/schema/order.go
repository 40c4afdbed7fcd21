// Package schema is the example's ent schema: one Order entity, stored in the orders
// table.
package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"
)

// Order is a business row written next to its events.
type Order struct {
	ent.Schema
}

// Fields of the Order.
func (Order) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("id"),
		field.Bool("wrapped").Default(false),
	}
}
