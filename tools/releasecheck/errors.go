package main

import (
	"fmt"
	"strings"
)

// NeverTaggedError is a released module that requires one of kfsdb's
// modules that is never tagged: no importer could resolve it (`unknown
// revision tests/v0.0.0`).
type NeverTaggedError struct {
	Module   string // the released module's directory, "." for the root
	Requires string // the module path it requires
}

func (e *NeverTaggedError) Error() string {
	return fmt.Sprintf("%s/go.mod requires %s, which is never tagged: no importer can resolve it "+
		"(move what needs it out of the released module, then go mod tidy)", e.Module, e.Requires)
}

// UnknownModuleError is a go.mod (or a required module path under kfsdb's)
// that releasecheck does not list as released or never tagged.
type UnknownModuleError struct {
	Path string // a directory holding a go.mod, or a required module path
}

func (e *UnknownModuleError) Error() string {
	return fmt.Sprintf("%s is neither a released nor a never-tagged kfsdb module: "+
		"add it to one of the two lists in tools/releasecheck/modules.go", e.Path)
}

// ReplaceError is a replace directive a released go.mod cannot be tagged
// with: only kfsdb's own modules replaced by a directory are dropped for
// the tag; any other replace would change what the importer's build sees.
type ReplaceError struct {
	Module string // the released module's directory
	Old    string // the replaced module path (and version, if any)
	New    string // its replacement
}

func (e *ReplaceError) Error() string {
	return fmt.Sprintf("%s/go.mod: replace %s => %s cannot be tagged (importers ignore it and "+
		"`go install …@version` refuses it); only kfsdb's own modules replaced by a directory are dropped",
		e.Module, e.Old, e.New)
}

// PathError is a tracked file the module zip format refuses, named by its
// path in the repository.
type PathError struct {
	Path   string // the file's path in the repository
	Module string // the module whose zip would hold it, "." for the root
	Reason string // the zip format's objection
}

func (e *PathError) Error() string {
	return fmt.Sprintf("%s (in module %s): %s", e.Path, e.Module, e.Reason)
}

// PathErrors are all the refused files of a tree, one per line.
type PathErrors []*PathError

func (es PathErrors) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d tracked file(s) the Go module zip format refuses (rename them; "+
		"golang.org/x/mod/module.CheckFilePath says why):", len(es))
	for _, e := range es {
		b.WriteString("\n  ")
		b.WriteString(e.Error())
	}
	return b.String()
}

// CycleError is a set of released modules that require each other: their
// go.sum files could not each name the others' sums at one version.
type CycleError struct {
	Modules []string
}

func (e *CycleError) Error() string {
	return "released modules require each other in a cycle: " + strings.Join(e.Modules, ", ")
}

// StepError is a rehearsal step that failed: the command, where it ran and
// the tail of what it printed.
type StepError struct {
	Step   string
	Cmd    string
	Dir    string
	Output string
	Err    error
}

func (e *StepError) Error() string {
	msg := fmt.Sprintf("%s: `%s` in %s: %v", e.Step, e.Cmd, e.Dir, e.Err)
	if out := strings.TrimSpace(e.Output); out != "" {
		msg += "\n" + indent(tail(out, 40))
	}
	return msg
}

func (e *StepError) Unwrap() error { return e.Err }

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("… (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}
