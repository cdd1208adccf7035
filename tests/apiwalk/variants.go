package apiwalk

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Rules say which fields' zero values are valid and which strings are
// cleaned rather than refused. Keys are "Type.Field".
type Rules struct {
	// Optional fields take a default when zero: zero is not tried.
	Optional map[string]bool
	// Sanitized string fields are cut and cleaned, not refused: only ""
	// is tried (on a *string field, nothing).
	Sanitized map[string]bool
	// Unchecked fields are not read by the call: nothing is tried.
	Unchecked map[string]bool
	// Defaults names struct types every field of which takes a default
	// when zero (a Config): zero is not tried on any of them.
	Defaults map[string]bool
}

// Variant is one call with one argument, or one field of one argument,
// nil, zero or malformed.
type Variant struct {
	Name string
	Args []reflect.Value
}

// BadStrings are tried on every string field: empty, invalid UTF-8, a NUL
// byte, 300 two-byte characters (over every limit).
var BadStrings = []string{"", "\xff", "a\x00b", strings.Repeat("é", 300)}

// farFuture is past PostgreSQL's last timestamp (294276 AD).
var farFuture = time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)

var (
	uuidType     = reflect.TypeFor[uuid.UUID]()
	timeType     = reflect.TypeFor[time.Time]()
	durationType = reflect.TypeFor[time.Duration]()
)

// Variants returns, for the arguments of a valid call of a function of
// type fn (a method's receiver is its first argument), a variant per
// argument set to its parameter type's zero value (nil, "", the zero UUID
// …) and, for an interface parameter holding a pointer, a typed nil; and
// for each argument index in deep, a variant per malformed value of it or
// of each of its fields, recursively through pointers, embedded and nested
// structs and the first element of slices. A variant equal to the valid
// call is left out.
func Variants(fn reflect.Type, args []any, deep []int, rules Rules) []Variant {
	valid := values(fn, args)
	var out []Variant
	with := func(name string, i int, v reflect.Value) {
		vs := slices.Clone(valid)
		vs[i] = v
		out = append(out, Variant{Name: name, Args: vs})
	}
	for i, a := range valid {
		in := fn.In(i)
		if !a.IsZero() {
			with(fmt.Sprintf("arg%d=zero(%s)", i, in), i, reflect.Zero(in))
		}
		if in.Kind() == reflect.Interface && slices.Contains([]reflect.Kind{reflect.Pointer, reflect.Func, reflect.Map, reflect.Slice}, a.Kind()) && !a.IsNil() {
			with(fmt.Sprintf("arg%d=nil %s", i, a.Type()), i, reflect.Zero(a.Type()))
		}
	}
	for _, i := range deep {
		for _, m := range fieldMutations(valid[i].Type(), rules, fmt.Sprintf("arg%d", i), "") {
			arg := reflect.New(valid[i].Type()).Elem()
			arg.Set(clone(valid[i]))
			if m.apply(arg) {
				with(m.name, i, arg)
			}
		}
	}
	return out
}

// mutation sets the value at a path inside an argument.
type mutation struct {
	name  string
	apply func(root reflect.Value) bool // false: nothing to change (already so)
}

// fieldMutations lists the malformed values of t's fields; owner is the
// struct type holding a field of type t ("" at the root), for Rules.
func fieldMutations(t reflect.Type, rules Rules, path, key string) []mutation {
	var out []mutation
	set := func(name string, v func(reflect.Type) reflect.Value) {
		out = append(out, setMutation(path+"="+name, v))
	}
	zero := func(t reflect.Type) reflect.Value { return reflect.Zero(t) }
	if key != "" && rules.Unchecked[key] {
		return nil
	}
	owner, _, _ := strings.Cut(key, ".")
	optional, sanitized := rules.Optional[key] || rules.Defaults[owner], rules.Sanitized[key]
	switch {
	case t == uuidType:
		if !optional {
			set("uuid.Nil", zero)
		}
		return out
	case t == timeType:
		if !optional {
			set("time.Time{}", zero)
		}
		set("year 300000", func(reflect.Type) reflect.Value { return reflect.ValueOf(farFuture) })
		return out
	case t == durationType:
		if !optional {
			set("0", zero)
		}
		set("-1ns", func(t reflect.Type) reflect.Value { return reflect.ValueOf(-time.Nanosecond) })
		return out
	}
	switch t.Kind() {
	case reflect.String:
		for _, s := range BadStrings {
			if (s == "" && optional) || (s != "" && sanitized) {
				continue
			}
			set(fmt.Sprintf("%q", trim(s)), func(t reflect.Type) reflect.Value { return reflect.ValueOf(s).Convert(t) })
		}
	case reflect.Int32, reflect.Int:
		if !optional {
			set("0", zero)
		}
		set("-1", func(t reflect.Type) reflect.Value { return reflect.ValueOf(-1).Convert(t) })
	case reflect.Float64:
		if !optional {
			set("0", zero)
		}
		for _, f := range []float64{-1, math.NaN(), math.Inf(1)} {
			set(fmt.Sprint(f), func(t reflect.Type) reflect.Value { return reflect.ValueOf(f).Convert(t) })
		}
	case reflect.Pointer:
		if !optional {
			set("nil", zero)
		}
		if t.Elem().Kind() == reflect.String && sanitized {
			return out
		}
		out = append(out, pointeeMutations(t, rules, path, key)...)
	case reflect.Slice:
		if !optional {
			set("nil", zero)
			set("empty", func(t reflect.Type) reflect.Value { return reflect.MakeSlice(t, 0, 0) })
		}
		out = append(out, firstElemMutations(t, rules, path)...)
	case reflect.Struct:
		out = append(out, structFieldMutations(t, rules, path)...)
	}
	return out
}

// setMutation sets the value at its path to v's value for the path's
// type, unless it is already that.
func setMutation(name string, v func(reflect.Type) reflect.Value) mutation {
	return mutation{name: name, apply: func(x reflect.Value) bool {
		nv := v(x.Type())
		if reflect.DeepEqual(x.Interface(), nv.Interface()) {
			return false
		}
		x.Set(nv)
		return true
	}}
}

// pointeeMutations points pointer type t to a malformed value: only where
// the valid call holds one (a nil pointer has nothing to point into). The
// field's rules hold for what it points to.
func pointeeMutations(t reflect.Type, rules Rules, path, key string) []mutation {
	var out []mutation
	for _, m := range fieldMutations(t.Elem(), rules, path, key) {
		out = append(out, mutation{name: m.name, apply: func(x reflect.Value) bool {
			return !x.IsNil() && m.apply(x.Elem())
		}})
	}
	return out
}

// firstElemMutations makes the first element of slice type t malformed,
// where the valid call has one.
func firstElemMutations(t reflect.Type, rules Rules, path string) []mutation {
	var out []mutation
	for _, m := range fieldMutations(t.Elem(), rules, path+"[0]", "") {
		out = append(out, mutation{name: m.name, apply: func(x reflect.Value) bool {
			return x.Len() > 0 && m.apply(x.Index(0))
		}})
	}
	return out
}

// structFieldMutations makes each exported field of struct type t
// malformed in turn; an embedded field's mutations keep the struct's path.
func structFieldMutations(t reflect.Type, rules Rules, path string) []mutation {
	var out []mutation
	for j := range t.NumField() {
		f := t.Field(j)
		if !f.IsExported() {
			continue
		}
		name := path + "." + f.Name
		if f.Anonymous {
			name = path
		}
		for _, m := range fieldMutations(f.Type, rules, name, t.Name()+"."+f.Name) {
			out = append(out, mutation{name: m.name, apply: func(x reflect.Value) bool { return m.apply(x.Field(j)) }})
		}
	}
	return out
}

func trim(s string) string {
	if len(s) > 12 {
		return s[:6] + "…"
	}
	return s
}

// clone deep-copies pointers, slices and structs (exported fields).
func clone(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		p := reflect.New(v.Type().Elem())
		p.Elem().Set(clone(v.Elem()))
		return p
	case reflect.Slice:
		if v.IsNil() {
			return v
		}
		s := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			s.Index(i).Set(clone(v.Index(i)))
		}
		return s
	case reflect.Struct:
		s := reflect.New(v.Type()).Elem()
		s.Set(v)
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				s.Field(i).Set(clone(v.Field(i)))
			}
		}
		return s
	}
	return v
}
