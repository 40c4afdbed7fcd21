package gormoutbox

import (
	"fmt"
	"reflect"

	"github.com/outboxer-go/outboxer/core"
)

// isNil reports whether v is nil or a nil pointer (or map, func, …) in an interface: a
// handle that would panic at its first use.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Interface, reflect.Chan, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}

// errNil is the error for a nil handle: it wraps core.ErrInvalidExecutor.
func errNil(what string) error {
	return fmt.Errorf("%w: nil %s", core.ErrInvalidExecutor, what)
}
