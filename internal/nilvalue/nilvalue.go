// Package nilvalue tells a nil value in an interface from a usable one.
package nilvalue

import "reflect"

// Is reports whether v is nil, or an interface holding a nil pointer, map,
// slice, func or channel (a "typed nil", such as a nil *T returned as an
// error): calling its methods may panic.
func Is(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}
