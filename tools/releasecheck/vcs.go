package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// sameAsTheGoCommand makes the release commit in a scratch clone (the
// commit with every released go.mod and go.sum as tagged), tags it as the
// release will, and has the go command fetch each module from those tags
// directly (git's url.insteadOf points github.com/knowledgefs/kfsdb at the
// clone): the zips it builds from git, as the module proxy will, must have
// the sums the rehearsal's zips have, which the tagged go.sum files name.
func (h *rehearsal) sameAsTheGoCommand() error {
	clone := filepath.Join(h.tmp, "git")
	noEnv := os.Environ()
	if _, err := h.r.run(h.tmp, noEnv, "git", "clone", "-q", "--shared", "--no-checkout", h.repo, clone); err != nil {
		return err
	}
	if _, err := h.r.run(clone, noEnv, "git", "checkout", "-q", "--detach", h.commit); err != nil {
		return err
	}
	add := []string{"add", "--"}
	for _, dir := range h.order {
		t := h.tagged[dir]
		for _, name := range []string{"go.mod", "go.sum"} {
			data := t.file(name)
			if data == nil {
				continue
			}
			p := path.Join(dir, name)
			if err := os.WriteFile(filepath.Join(clone, filepath.FromSlash(p)), data, 0o644); err != nil {
				return err
			}
			add = append(add, p)
		}
	}
	gitID := withEnv(noEnv, map[string]string{
		"GIT_AUTHOR_NAME": "releasecheck", "GIT_AUTHOR_EMAIL": "releasecheck@invalid",
		"GIT_COMMITTER_NAME": "releasecheck", "GIT_COMMITTER_EMAIL": "releasecheck@invalid",
	})
	if _, err := h.r.run(clone, noEnv, "git", add...); err != nil {
		return err
	}
	if _, err := h.r.run(clone, gitID, "git", "commit", "-q", "--allow-empty", "-m", "release "+h.version); err != nil {
		return err
	}
	for _, dir := range h.order {
		if _, err := h.r.run(clone, gitID, "git", "tag", Tag(dir, h.version)); err != nil {
			return err
		}
	}
	gitconfig := filepath.Join(h.tmp, "gitconfig")
	cfg := fmt.Sprintf("[url %q]\n\tinsteadOf = https://%s\n[protocol \"file\"]\n\tallow = always\n", clone, ModulePrefix)
	if err := os.WriteFile(gitconfig, []byte(cfg), 0o644); err != nil {
		return err
	}
	gopath := filepath.Join(h.tmp, "gopath-direct")
	env := withEnv(h.env, map[string]string{
		"GIT_CONFIG_GLOBAL":   gitconfig,
		"GIT_CONFIG_NOSYSTEM": "1",
		"GOPRIVATE":           ModulePrefix,
		"GONOPROXY":           ModulePrefix,
		"GOPATH":              gopath,
		"GOMODCACHE":          filepath.Join(gopath, "pkg", "mod"),
		"GOFLAGS":             "",
	})
	args := []string{"mod", "download", "-json"}
	for _, dir := range h.order {
		args = append(args, ModulePath(dir)+"@"+h.version)
	}
	out, err := h.r.run(h.tmp, env, "go", args...)
	if err != nil {
		return err
	}
	got := map[string]Sums{}
	dec := json.NewDecoder(strings.NewReader(out))
	for {
		var m struct{ Path, Sum, GoModSum, Error string }
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			return fmt.Errorf("go mod download -json: %w", err)
		}
		if m.Error != "" {
			return fmt.Errorf("go mod download %s: %s", m.Path, m.Error)
		}
		got[m.Path] = Sums{Zip: m.Sum, GoMod: m.GoModSum}
	}
	var bad []string
	for _, dir := range h.order {
		t := h.tagged[dir]
		if g := got[t.Path]; g != t.Sums {
			bad = append(bad, fmt.Sprintf("%s: the go command has %s %s, the rehearsal %s %s", t.Path, g.Zip, g.GoMod, t.Sums.Zip, t.Sums.GoMod))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("the go command's zips of the release commit differ from the rehearsal's "+
			"(the tagged go.sum files would not match what the proxy serves):\n  %s", strings.Join(bad, "\n  "))
	}
	h.r.note("the go command built the %d zips from the tags and has the rehearsal's sums for each", len(h.order))
	return nil
}
