package main

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// appFiles are the application's files beside the README's quick start:
// a test on the kit and a package importing every adapter.
//
//go:embed testdata/app
var appFiles embed.FS

// quickstart is the README's quick start, in the kit's module.
const quickstart = "kfsdbtest/quickstart/main.go"

// Tagged is a released module as its tag will hold it.
type Tagged struct {
	Dir   string
	Path  string
	Deps  []string // released modules it requires
	GoMod []byte   // go.mod as tagged (rewritten, then go mod tidy)
	GoSum []byte   // go.sum as tagged (go mod tidy against the proxy)
	Sums  Sums     // its go.sum lines in an importer's go.sum
	Files []modzip.File
}

// file is the tagged go.mod or go.sum.
func (t *Tagged) file(name string) []byte {
	if name == "go.mod" {
		return t.GoMod
	}
	return t.GoSum
}

type rehearsal struct {
	repo    string
	rev     string
	version string
	tmp     string
	write   bool
	r       *runner
	env     []string
	commit  string
	tree    map[string]TreeFile
	tagged  map[string]*Tagged
	order   []string
	pathErr error // the refused paths of step 1, reported with step 2's errors
}

func (h *rehearsal) proxyDir() string { return filepath.Join(h.tmp, "proxy") }

// Run is the whole rehearsal; it stops at the first failing step.
func (h *rehearsal) Run() error {
	steps := []struct {
		name string
		fn   func() error
	}{
		{"the commit's files, as module zips see them", h.readTree},
		{"released go.mods as tagged", h.rewrite},
		{"module zips into the file proxy, in tag order (go mod tidy each against the proxy)", h.publish},
		{"the go command's own zips of the release commit have the same sums (tags in a scratch clone, fetched direct)", h.sameAsTheGoCommand},
		{"each released module builds from its own tagged go.mod and go.sum (-mod=readonly)", h.checkouts},
		{"an application in an empty module, outside the repository", h.app},
		{"go install the deploy binary", h.install},
		{"the release commit and its tags", h.plan},
	}
	for i, s := range steps {
		h.r.section(fmt.Sprintf("%d. %s", i+1, s.name))
		err := s.fn()
		if i == 1 && h.pathErr != nil {
			// The tree's refused paths and the go.mods that cannot be tagged
			// are both found without a go command: report them together.
			if err != nil {
				err = fmt.Errorf("step 2 (%s):\n%w", s.name, err)
			}
			err = errors.Join(fmt.Errorf("step 1 (%s):\n%w", steps[0].name, h.pathErr), err)
			return fmt.Errorf("the commit cannot be released as it is:\n%w", err)
		}
		if err != nil {
			return fmt.Errorf("step %d (%s) failed:\n%w", i+1, s.name, err)
		}
	}
	return nil
}

func (h *rehearsal) readTree() error {
	out, err := exec.Command("git", "-C", h.repo, "rev-parse", h.rev+"^{commit}").Output()
	if err != nil {
		return fmt.Errorf("git rev-parse %s in %s: %w", h.rev, h.repo, err)
	}
	h.commit = strings.TrimSpace(string(out))
	h.r.note("commit %s (%s); uncommitted changes are not part of the rehearsal", h.commit, h.rev)
	if h.tree, err = ArchiveTree(h.repo, h.commit); err != nil {
		return err
	}
	dirs := GoModDirs(h.tree)
	h.r.note("%d files, modules %s", len(h.tree), strings.Join(dirs, " "))
	if err := CheckModuleDirs(dirs); err != nil {
		return err
	}
	if err := CheckTree(h.tree); err != nil {
		var pe PathErrors
		if !errors.As(err, &pe) {
			return err
		}
		// Go on to the go.mods, so that one run names every static problem.
		h.pathErr = err
		h.r.note("REFUSED: %d path(s) the module zip format refuses (listed at the end)", len(pe))
		return nil
	}
	h.r.note("every path is one the module zip format accepts")
	return nil
}

func (h *rehearsal) rewrite() error {
	h.tagged = map[string]*Tagged{}
	deps := map[string][]string{}
	var errs []string
	for _, dir := range Released {
		f, ok := h.tree[path.Join(dir, "go.mod")]
		if !ok {
			return fmt.Errorf("%s/go.mod is not in the commit", dir)
		}
		data, err := readAll(f)
		if err != nil {
			return err
		}
		goMod, d, err := RewriteGoMod(dir, data, h.version)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		deps[dir] = d
		h.tagged[dir] = &Tagged{Dir: dir, Path: ModulePath(dir), Deps: d, GoMod: goMod}
		h.r.note("%-16s requires %s", dir, orNone(d, " at "+h.version))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d released go.mod(s) cannot be tagged as they are:\n  %s", len(errs), strings.Join(errs, "\n  "))
	}
	order, err := TagOrder(deps)
	if err != nil {
		return err
	}
	h.order = order
	h.r.note("tag order (each after what it requires): %s", strings.Join(order, ", "))
	return nil
}

// publish makes each released module's tagged go.mod and go.sum (the
// rewritten go.mod, tidied against the proxy holding the modules before
// it) and puts its zip in the proxy.
func (h *rehearsal) publish() error {
	for _, dir := range h.order {
		t := h.tagged[dir]
		files := ModuleFiles(h.tree, dir)
		cf, err := modzip.CheckFiles(files)
		if err != nil {
			return fmt.Errorf("module %s: %w", dir, err)
		}
		scratch := filepath.Join(h.tmp, "tagged", filepath.FromSlash(dir))
		valid := map[string]bool{}
		for _, p := range cf.Valid {
			valid[p] = true
		}
		var kept []modzip.File
		for _, f := range files {
			if valid[f.Path()] {
				kept = append(kept, f)
			}
		}
		if err := writeFiles(scratch, kept, map[string][]byte{"go.mod": t.GoMod}); err != nil {
			return err
		}
		if _, err := h.r.run(scratch, h.env, "go", "mod", "tidy"); err != nil {
			return err
		}
		tidied, err := os.ReadFile(filepath.Join(scratch, "go.mod"))
		if err != nil {
			return err
		}
		if !bytes.Equal(tidied, t.GoMod) {
			h.r.note("go mod tidy changed the rewritten go.mod: %s", lineDiff(t.GoMod, tidied))
		}
		t.GoMod = tidied
		if t.GoSum, err = os.ReadFile(filepath.Join(scratch, "go.sum")); err != nil && !os.IsNotExist(err) {
			return err
		}
		t.Files = override(kept, map[string][]byte{"go.mod": t.GoMod, "go.sum": t.GoSum})
		if t.Sums, err = Publish(h.proxyDir(), dir, t.Path, h.version, t.Files, t.GoMod, time.Now()); err != nil {
			return err
		}
		h.r.note("published %s@%s %s (%d files)", t.Path, h.version, t.Sums.Zip, len(t.Files))
	}
	return nil
}

// checkouts unpacks each released module's zip from the proxy (what a
// checkout of its tag holds) and loads every package and test of it with
// -mod=readonly: a go.sum line missing at the tag fails here. The deploy
// binary is also built that way.
func (h *rehearsal) checkouts() error {
	env := withEnv(h.env, map[string]string{"GOFLAGS": "-mod=readonly -trimpath"})
	for _, dir := range h.order {
		t := h.tagged[dir]
		co := filepath.Join(h.tmp, "checkout", filepath.FromSlash(dir))
		zipPath := filepath.Join(h.proxyDir(), filepath.FromSlash(mustEscape(t.Path)), "@v", h.version+".zip")
		if err := modzip.Unzip(co, module.Version{Path: t.Path, Version: h.version}, zipPath); err != nil {
			return err
		}
		if _, err := h.r.run(co, env, "go", "list", "-deps", "-test", "./..."); err != nil {
			return err
		}
		if dir == "cmd/kfsdb" {
			if _, err := h.r.run(co, env, "go", "build", "-o", filepath.Join(h.tmp, "kfsdb-from-checkout"), "."); err != nil {
				return err
			}
		}
	}
	return nil
}

// app is the new user's path: an empty module outside the repository, each
// released module fetched at the version, the README's quick start, a test
// on the kit and a package importing every adapter, then tidy, build,
// list and download.
func (h *rehearsal) app() error {
	app := filepath.Join(h.tmp, "app")
	if err := os.MkdirAll(app, 0o755); err != nil {
		return err
	}
	if _, err := h.r.run(app, h.env, "go", "mod", "init", "example.com/kfsdbapp"); err != nil {
		return err
	}
	for _, dir := range Released {
		if _, err := h.r.run(app, h.env, "go", "get", ModulePath(dir)+"@"+h.version); err != nil {
			return err
		}
	}
	qs, err := readAll(h.tree[quickstart])
	if err != nil {
		return fmt.Errorf("the README's quick start %s: %w", quickstart, err)
	}
	if err := os.MkdirAll(filepath.Join(app, "quickstart"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(app, "quickstart", "main.go"), qs, 0o644); err != nil {
		return err
	}
	sub, err := fs.Sub(appFiles, "testdata/app")
	if err != nil {
		return err
	}
	if err := os.CopyFS(app, sub); err != nil {
		return err
	}
	h.r.note("wrote quickstart/main.go (%s), kit/kit_test.go, adapters/adapters.go", quickstart)
	for _, args := range [][]string{
		{"mod", "tidy"},
		{"build", "./..."},
		{"test", "-c", "-o", filepath.Join(h.tmp, "kit.test"), "./kit"},
	} {
		if _, err := h.r.run(app, h.env, "go", args...); err != nil {
			return err
		}
	}
	out, err := h.r.run(app, h.env, "go", "list", "-m", "all")
	if err != nil {
		return err
	}
	if err := h.checkModList(out); err != nil {
		return err
	}
	_, err = h.r.run(app, h.env, "go", "mod", "download", "all")
	return err
}

// checkModList refuses a module list (go list -m all) naming a kfsdb module
// that is never tagged, or a released one at another version.
func (h *rehearsal) checkModList(out string) error {
	var ours []string
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		n++
		dir, ok := ModuleDir(fields[0])
		if !ok {
			continue
		}
		if !isReleased(dir) {
			return fmt.Errorf("go list -m all names %s, a kfsdb module that is never tagged", fields[0])
		}
		if len(fields) < 2 || fields[1] != h.version {
			return fmt.Errorf("go list -m all has %q, want %s at %s", line, fields[0], h.version)
		}
		ours = append(ours, dir)
	}
	h.r.note("%d modules in the application's graph; kfsdb's: %s", n, strings.Join(ours, " "))
	return nil
}

func (h *rehearsal) install() error {
	env := withEnv(h.env, map[string]string{"GOFLAGS": "-trimpath"})
	pkg := ModulePath("cmd/kfsdb") + "@" + h.version
	if _, err := h.r.run(h.tmp, env, "go", "install", pkg); err != nil {
		return err
	}
	out, err := h.r.run(h.tmp, env, filepath.Join(h.tmp, "bin", "kfsdb"), "--help")
	if err != nil {
		return err
	}
	h.r.note("%s", strings.ReplaceAll(strings.TrimSpace(firstLines(out, 4)), "\n", "\n   "))
	return nil
}

// plan prints (and with -write, writes) what the release commit changes and
// the tags it gets.
func (h *rehearsal) plan() error {
	var changed []string
	for _, dir := range h.order {
		t := h.tagged[dir]
		for _, name := range []string{"go.mod", "go.sum"} {
			data := t.file(name)
			p := path.Join(dir, name)
			var cur []byte
			if f, ok := h.tree[p]; ok {
				var err error
				if cur, err = readAll(f); err != nil {
					return err
				}
			}
			if !bytes.Equal(cur, data) {
				changed = append(changed, p+" ("+lineDiff(cur, data)+")")
				if h.write {
					if err := os.WriteFile(filepath.Join(h.repo, filepath.FromSlash(p)), data, 0o644); err != nil {
						return err
					}
				}
			}
		}
	}
	sort.Strings(changed)
	if len(changed) == 0 {
		h.r.note("commit %s holds every released go.mod and go.sum as tagged: tag it", h.commit[:12])
	} else {
		verb := "would change"
		if h.write {
			verb = "changed (written to the work tree: review, commit)"
		}
		h.r.note("the release commit on top of %s %s:", h.commit[:12], verb)
		for _, c := range changed {
			h.r.note("  %s", c)
		}
		if !h.write {
			h.r.note("(releasecheck -write writes them; docs/RELEASING.md)")
		}
	}
	h.r.note("then tag that one commit, in this order, and push the tags together:")
	for _, dir := range h.order {
		h.r.note("  git tag -a %s -m \"%s %s\"", Tag(dir, h.version), h.tagged[dir].Path, h.version)
	}
	h.r.note("after the tags are pushed, the next commit restores the development go.mods (git revert the release commit)")
	h.r.note("each module's sums as an importer's go.sum will hold them:")
	for _, dir := range h.order {
		t := h.tagged[dir]
		h.r.note("  %s %s %s", t.Path, h.version, t.Sums.Zip)
	}
	return nil
}
