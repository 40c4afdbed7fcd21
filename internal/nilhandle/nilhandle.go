// Package nilhandle tells whether a database handle given to the engine or an adapter is
// nil, so that a nil handle becomes an error instead of a panic at its first use.
package nilhandle

import "reflect"

// Is reports whether v is nil, or a nil pointer, map, slice, func, channel or interface
// inside an interface.
func Is(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Interface, reflect.Chan, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}
