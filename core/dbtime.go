package core

import "github.com/outboxer-go/outboxer/internal/dbtime"

// dbTime scans a time column as the dialect's TimeCol selects it (see dbtime.Time, which
// the dashboard shares).
type dbTime = dbtime.Time
