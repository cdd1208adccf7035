package main

import (
	"fmt"
	"path"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
)

// ModulePrefix is the path of kfsdb's root module; every kfsdb module's
// path is it or lies under it.
const ModulePrefix = "github.com/knowledgefs/kfsdb"

// Released are the directories of the modules a release tags (docs/RELEASING.md),
// in the order the tags are listed there. A nested module's tag is its
// directory followed by the version.
var Released = []string{".", "migrate", "kfsdbtest", "adapters/natsjs", "adapters/prom", "adapters/otel", "cmd/kfsdb"}

// NeverTagged are kfsdb's own development modules: no release tags them, so
// no released module may require them.
var NeverTagged = []string{"tests", "tools", "bench/river", "bench/kfsdb-bench"}

// ModulePath is the module path of the module in directory dir.
func ModulePath(dir string) string {
	if dir == "." || dir == "" {
		return ModulePrefix
	}
	return ModulePrefix + "/" + dir
}

// ModuleDir is the directory of kfsdb's module path p, and whether p is
// one of kfsdb's paths at all.
func ModuleDir(p string) (string, bool) {
	if p == ModulePrefix {
		return ".", true
	}
	if rest, ok := strings.CutPrefix(p, ModulePrefix+"/"); ok {
		return rest, true
	}
	return "", false
}

// Tag is the git tag of module dir at version v.
func Tag(dir, v string) string {
	if dir == "." {
		return v
	}
	return dir + "/" + v
}

func isReleased(dir string) bool    { return contains(Released, dir) }
func isNeverTagged(dir string) bool { return contains(NeverTagged, dir) }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// CheckModuleDirs refuses a go.mod in a directory that is neither released
// nor never tagged, and a listed module that has no go.mod.
func CheckModuleDirs(goModDirs []string) error {
	seen := map[string]bool{}
	for _, d := range goModDirs {
		seen[d] = true
		if !isReleased(d) && !isNeverTagged(d) {
			return &UnknownModuleError{Path: d}
		}
	}
	for _, d := range append(append([]string{}, Released...), NeverTagged...) {
		if !seen[d] {
			return fmt.Errorf("module %s is listed in tools/releasecheck/modules.go but %s/go.mod is not tracked", d, d)
		}
	}
	return nil
}

// RewriteGoMod returns the go.mod of released module dir as it is tagged at
// version v: every kfsdb module it requires is required at v, and the
// replace directives that point kfsdb's modules at their directories are
// gone. It refuses a requirement of a never-tagged (or unknown) kfsdb
// module and any other replace, and returns the released kfsdb modules
// the go.mod requires (their directories, sorted).
func RewriteGoMod(dir string, data []byte, v string) ([]byte, []string, error) {
	f, err := modfile.Parse(path.Join(dir, "go.mod"), data, nil)
	if err != nil {
		return nil, nil, err
	}
	if f.Module == nil || f.Module.Mod.Path != ModulePath(dir) {
		got := "(none)"
		if f.Module != nil {
			got = f.Module.Mod.Path
		}
		return nil, nil, fmt.Errorf("%s/go.mod declares module %s, want %s", dir, got, ModulePath(dir))
	}
	var deps []string
	for _, r := range f.Require {
		d, ours := ModuleDir(r.Mod.Path)
		if !ours {
			continue
		}
		switch {
		case isNeverTagged(d):
			return nil, nil, &NeverTaggedError{Module: dir, Requires: r.Mod.Path}
		case !isReleased(d):
			return nil, nil, &UnknownModuleError{Path: r.Mod.Path}
		}
		if err := f.AddRequire(r.Mod.Path, v); err != nil {
			return nil, nil, err
		}
		deps = append(deps, d)
	}
	for _, r := range append([]*modfile.Replace{}, f.Replace...) {
		_, ours := ModuleDir(r.Old.Path)
		if !ours || r.New.Version != "" || !modfile.IsDirectoryPath(r.New.Path) {
			old := r.Old.Path
			if r.Old.Version != "" {
				old += " " + r.Old.Version
			}
			return nil, nil, &ReplaceError{Module: dir, Old: old, New: strings.TrimSpace(r.New.Path + " " + r.New.Version)}
		}
		if err := f.DropReplace(r.Old.Path, r.Old.Version); err != nil {
			return nil, nil, err
		}
	}
	f.Cleanup()
	out, err := f.Format()
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(deps)
	return out, deps, nil
}

// TagOrder orders released modules so that each comes after every module
// it requires (deps maps a directory to the released directories it
// requires); ties keep the order of Released.
func TagOrder(deps map[string][]string) ([]string, error) {
	var order []string
	done := map[string]bool{}
	for len(order) < len(deps) {
		progressed := false
		for _, d := range Released {
			if _, ok := deps[d]; !ok || done[d] {
				continue
			}
			ready := true
			for _, r := range deps[d] {
				if !done[r] {
					ready = false
				}
			}
			if ready {
				order = append(order, d)
				done[d] = true
				progressed = true
			}
		}
		if !progressed {
			var left []string
			for _, d := range Released {
				if _, ok := deps[d]; ok && !done[d] {
					left = append(left, d)
				}
			}
			return nil, &CycleError{Modules: left}
		}
	}
	return order, nil
}
