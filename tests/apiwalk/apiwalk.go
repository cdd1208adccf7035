// Package apiwalk drives a package's exported API with nil, zero and
// malformed input. Exported lists the package's exported functions and
// methods from its source (go/ast), so that a walk can require a case for
// each one and fails when a new one has none; Variants derives, from the
// arguments of one valid call, every variant with one argument, or one
// field of one argument, nil, zero or malformed; Call runs a variant and
// turns a panic into a value.
package apiwalk

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// Exported returns the exported API declared in the non-test Go files of
// dir: "Func" for each exported function and "Type.Method" for each
// exported method of an exported type.
func Exported(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("apiwalk: read %s: %v", dir, err)
	}
	fset := token.NewFileSet()
	var names []string
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("apiwalk: parse %s: %v", name, err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || !fn.Name.IsExported() {
				continue
			}
			if fn.Recv == nil {
				names = append(names, fn.Name.Name)
				continue
			}
			if recv := receiverType(fn.Recv.List[0].Type); ast.IsExported(recv) {
				names = append(names, recv+"."+fn.Name.Name)
			}
		}
	}
	slices.Sort(names)
	return names
}

func receiverType(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return receiverType(x.X)
	case *ast.IndexExpr:
		return receiverType(x.X)
	case *ast.Ident:
		return x.Name
	}
	return ""
}

// RequireComplete fails t unless names (the walk's cases) are exactly the
// exported API of dir: an exported function without a case, or a case for
// one that is gone, fails the walk.
func RequireComplete(t testing.TB, dir string, names []string) {
	t.Helper()
	api := Exported(t, dir)
	have := slices.Sorted(slices.Values(names))
	var missing, stale []string
	for _, n := range api {
		if !slices.Contains(have, n) {
			missing = append(missing, n)
		}
	}
	for _, n := range have {
		if !slices.Contains(api, n) {
			stale = append(stale, n)
		}
	}
	if len(missing) > 0 || len(stale) > 0 {
		t.Fatalf("apiwalk: %s: exported without a case: %v; cases without an exported function: %v", dir, missing, stale)
	}
}

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
		out = append(out, mutation{name: path + "=" + name, apply: func(x reflect.Value) bool {
			nv := v(x.Type())
			if reflect.DeepEqual(x.Interface(), nv.Interface()) {
				return false
			}
			x.Set(nv)
			return true
		}})
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
	case reflect.Pointer:
		if !optional {
			set("nil", zero)
		}
		if t.Elem().Kind() == reflect.String && sanitized {
			return out
		}
		// A pointer to a malformed value: only where the valid call holds
		// one (a nil pointer has nothing to point into). The field's
		// rules hold for what it points to.
		for _, m := range fieldMutations(t.Elem(), rules, path, key) {
			out = append(out, mutation{name: m.name, apply: func(x reflect.Value) bool {
				return !x.IsNil() && m.apply(x.Elem())
			}})
		}
	case reflect.Slice:
		if !optional {
			set("nil", zero)
			set("empty", func(t reflect.Type) reflect.Value { return reflect.MakeSlice(t, 0, 0) })
		}
		for _, m := range fieldMutations(t.Elem(), rules, path+"[0]", "") {
			out = append(out, mutation{name: m.name, apply: func(x reflect.Value) bool {
				return x.Len() > 0 && m.apply(x.Index(0))
			}})
		}
	case reflect.Struct:
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
