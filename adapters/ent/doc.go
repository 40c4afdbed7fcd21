// Package entoutbox publishes Outboxer messages through ent (entgo.io/ent): in an ent
// transaction, with a run-in-transaction helper, or from a mutation hook that turns
// mutations into messages in the mutation's own transaction.
//
// The import path ends in ent; the package is named entoutbox so that it does not
// shadow ent itself.
//
// # Generate with sql/execquery
//
// ent's generated Tx hides the *sql.Tx it runs on. Generated with the sql/execquery
// feature, the client and the transaction get ExecContext and QueryContext, which run on
// that very *sql.Tx (or *sql.DB for the client); that is all the adapter needs:
//
//	go run -mod=mod entgo.io/ent/cmd/ent generate --feature sql/execquery ./ent/schema
//
// Then the generated *ent.Tx is an ExecQuerier, and publishing in it stores the message
// if and only if the transaction commits:
//
//	tx, _ := client.Tx(ctx)
//	order, _ := tx.Order.Create().SetNote("two books").Save(ctx)
//	entoutbox.Publish(ctx, ob, tx, OrderPlaced{ID: order.ID})
//	tx.Commit()
//
// InTx does the same in one call (entoutbox.InTx(ctx, ob, client.Tx, fn)), rolls back on
// an error or a panic, and wakes the instance's workers as soon as the transaction
// commits.
//
// # The mutation hook
//
// Hook[*ent.Tx](ob, derive) is an ent.Hook: after each successful mutation it asks
// derive for the messages the mutation means (an OrderPlaced for a created Order, say)
// and publishes them. It finds the mutation's transaction through the generated
// mutation's Tx() method, which returns the *ent.Tx the mutation runs in; the messages
// go through that transaction's ExecContext and QueryContext, so they commit or roll back
// with the mutation. That is why Hook takes the generated transaction type as its type
// parameter. Inside InTx the workers are also woken after the commit for what the hooks
// published; in a transaction of your own they find the messages at their next poll (at
// once with Config.Notify).
//
// On a client that is not in a transaction the mutation commits on its own before the
// hook publishes (through the instance's DB), so a crash between the two loses the
// message. Set Config.RequireTransaction to refuse such mutations, before they run, with
// core.ErrNotInTransaction.
//
// # Outside a transaction
//
// Publish with the *ent.Client stores the message at once, atomically on its own, and
// PublishAll all the messages or none (through the instance's DB, as the hook does). An
// instance with Config.RequireTransaction refuses either with core.ErrNotInTransaction.
//
// # Nested transactions
//
// ent has no nested transactions: client.Tx inside a transaction begins another,
// separate one. Savepoint issues SAVEPOINT statements through an *ent.Tx instead. When
// its function fails, the transaction goes back to the savepoint: the messages published
// inside it (by Publish or by hooks) are gone with the rows written inside it, while
// those published before or after it commit with the transaction.
//
// # Migrations
//
// Migrations holds the outbox tables as Atlas-ready SQL, one versioned directory per
// dialect with its atlas.sum, equal to core.MigrationSQL (a test checks it). Copy the
// file into the migration directory Atlas manages for your ent schema and rehash it, or
// call core.Migrate on the *sql.DB under your client.
package entoutbox
