package entoutbox

import (
	"fmt"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/internal/nilhandle"
)

// errNil is the error for a nil handle: it wraps core.ErrInvalidExecutor.
func errNil(what string) error {
	return fmt.Errorf("%w: nil %s", core.ErrInvalidExecutor, what)
}

// isNil reports whether a handle is nil (see nilhandle.Is).
func isNil(v any) bool { return nilhandle.Is(v) }
