// Package apiwalk drives a package's exported API with nil, zero and
// malformed input. Exported lists the package's exported functions and
// methods from its source (go/ast), so that a walk can require a case for
// each one and fails when a new one has none; Variants derives, from the
// arguments of one valid call, every variant with one argument, or one
// field of one argument, nil, zero or malformed; Call runs a variant and
// turns a panic into a value.
package apiwalk

import (
	"maps"
	"reflect"
	"slices"
	"testing"
)

// Call calls fn with args and returns its results, or the value it
// panicked with.
func Call(fn reflect.Value, args []reflect.Value) (out []reflect.Value, panicked any) {
	defer func() { panicked = recover() }()
	in := make([]reflect.Value, len(args))
	for i, a := range args {
		in[i] = a
		if !a.IsValid() {
			in[i] = reflect.Zero(fn.Type().In(i))
		}
	}
	return fn.Call(in), nil
}

// Err returns the last result if it is an error (nil when it is a nil
// error), and whether there is one.
func Err(out []reflect.Value) (error, bool) {
	if len(out) == 0 {
		return nil, false
	}
	last := out[len(out)-1]
	if last.Type() != reflect.TypeFor[error]() {
		return nil, false
	}
	err, _ := last.Interface().(error)
	return err, true
}

// Case is one exported function or method: a valid call (a method's
// receiver first) and how to derive and judge its variants.
type Case struct {
	Fn   any
	Args []any
	// Deep are the arguments whose fields are made malformed one by one.
	Deep []int
	// Extra are further calls, by name, that must be refused.
	Extra map[string][]any
	// Valid names variants that are not refused (a nil *Config, …).
	Valid []string
	// Unwrap: the error result is a cause (an Unwrap method), not a
	// refusal; only a panic fails.
	Unwrap bool
	// Err picks the call's error from its results. Defaults to Err: the
	// last result, when it is an error.
	Err func(out []reflect.Value) (error, bool)
	// SkipValidCall leaves the valid call out (it would block or needs
	// what the walk does not set up).
	SkipValidCall bool
}

// Probe runs one variant's call and returns the check of its error,
// called once the variant was refused (a non-nil error).
type Probe func(call func()) func(t *testing.T, variant string, err error)

// Walk requires cases to cover exactly the exported API of dir, then
// runs, for each case, its valid call (valid checks its error) and every
// variant: none may panic, and each that is not Valid must return a
// non-nil error, which probe's check judges.
func Walk(t *testing.T, dir string, cases map[string]Case, rules Rules, probe Probe, valid func(t *testing.T, err error)) {
	t.Helper()
	names := slices.Sorted(maps.Keys(cases))
	RequireComplete(t, dir, names)
	for _, name := range names {
		c := cases[name]
		t.Run(name, func(t *testing.T) {
			fn := reflect.ValueOf(c.Fn)
			errOf := c.Err
			if errOf == nil {
				errOf = Err
			}
			if !c.SkipValidCall {
				out, p := Call(fn, values(fn.Type(), c.Args))
				if p != nil {
					t.Fatalf("the valid call panicked: %v", p)
				}
				if err, ok := errOf(out); ok && !c.Unwrap {
					valid(t, err)
				}
			}
			variants := Variants(fn.Type(), c.Args, c.Deep, rules)
			for _, extra := range slices.Sorted(maps.Keys(c.Extra)) {
				variants = append(variants, Variant{Name: extra, Args: values(fn.Type(), c.Extra[extra])})
			}
			for _, v := range variants {
				var out []reflect.Value
				var p any
				check := probe(func() { out, p = Call(fn, v.Args) })
				if p != nil {
					t.Errorf("%s panicked: %v", v.Name, p)
					continue
				}
				err, hasErr := errOf(out)
				switch {
				case !hasErr || c.Unwrap || slices.Contains(c.Valid, v.Name):
				case err == nil:
					t.Errorf("%s: no error", v.Name)
				default:
					check(t, v.Name, err)
				}
			}
		})
	}
}

// values turns arguments into reflect values, a nil any into the
// parameter type's zero value.
func values(fn reflect.Type, args []any) []reflect.Value {
	out := make([]reflect.Value, len(args))
	for i, a := range args {
		if a == nil {
			out[i] = reflect.Zero(fn.In(i))
		} else {
			out[i] = reflect.ValueOf(a)
		}
	}
	return out
}
