// Command releasecheck rehearses a kfsdb release before any tag exists
// (make release-check; docs/RELEASING.md tells the story).
//
//	releasecheck [-repo DIR] [-rev HEAD] [-version v0.1.0] [-keep] [-write]
//	releasecheck paths [-repo DIR]
//
// The rehearsal builds every released module's zip from the commit (git
// archive, never the work tree) with golang.org/x/mod/zip into a file
// module proxy, each go.mod as it will be tagged (kfsdb's modules required
// at the version, no replace) and tidied against that proxy, then plays a
// new user in an empty module outside the repository: go get each
// module, the README's quick start, a test on the kit, every adapter
// imported, go mod tidy, go list -m all, go mod download all and go
// install of the deploy binary. It prints every command and stops at the
// first failure with the reason. Its go commands use a private module
// cache in a temporary directory; the machine's download cache is read
// (a file:// proxy) before the real proxy, so a warm machine downloads
// little.
//
// paths checks only that every tracked path is one the module zip format
// accepts (make check-tree).
package main

import (
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/semver"
)

func main() {
	name := "release-check"
	if len(os.Args) > 1 && os.Args[1] == "paths" {
		name = "check-tree"
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "\n%s: FAILED\n%v\n", name, err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) > 0 && args[0] == "paths" {
		fl := flag.NewFlagSet("releasecheck paths", flag.ContinueOnError)
		repo := fl.String("repo", ".", "the repository")
		if err := fl.Parse(args[1:]); err != nil {
			return err
		}
		tree, err := IndexTree(*repo)
		if err != nil {
			return err
		}
		if err := CheckTree(tree); err != nil {
			return err
		}
		fmt.Printf("check-tree: every tracked path (%d) is one the Go module zip format accepts\n", len(tree))
		return nil
	}
	fl := flag.NewFlagSet("releasecheck", flag.ContinueOnError)
	repo := fl.String("repo", ".", "the repository")
	rev := fl.String("rev", "HEAD", "the commit to rehearse")
	version := fl.String("version", "v0.1.0", "the version to rehearse (the next release's: the sums depend on it)")
	keep := fl.Bool("keep", false, "keep the temporary directory (proxy, module cache, application)")
	write := fl.Bool("write", false, "write the released go.mod and go.sum files as tagged into the work tree (for the release commit)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fl.Arg(0))
	}
	if !semver.IsValid(*version) || semver.Canonical(*version) != *version || semver.Build(*version) != "" {
		return fmt.Errorf("-version %q is not a canonical semantic version like v0.1.0", *version)
	}
	if semver.Major(*version) != "v0" && semver.Major(*version) != "v1" {
		return fmt.Errorf("-version %s needs /%s module paths; releasecheck knows only v0 and v1", *version, semver.Major(*version))
	}
	abs, err := filepath.Abs(*repo)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "kfsdb-release-check-")
	if err != nil {
		return err
	}
	r := &runner{out: os.Stdout, t0: time.Now()}
	h := &rehearsal{repo: abs, rev: *rev, version: *version, tmp: tmp, write: *write, r: r}
	if h.env, err = goEnv(tmp, h.proxyDir()); err != nil {
		return err
	}
	fmt.Printf("release-check: rehearsing %s of %s in %s\n", *version, abs, tmp)
	for _, k := range []string{"GOWORK", "GOFLAGS", "GOPROXY", "GONOSUMDB", "GOMODCACHE", "GOTOOLCHAIN"} {
		for _, kv := range h.env {
			if strings.HasPrefix(kv, k+"=") {
				fmt.Printf("  %s\n", kv)
			}
		}
	}
	err = h.Run()
	if *keep {
		fmt.Printf("\nkept %s (proxy/, gopath/, app/, checkout/, tagged/)\n", tmp)
	} else if cerr := cleanup(tmp); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	fmt.Printf("\nrelease-check: %s rehearsed in %.0fs: every released module resolves from the proxy with no replace and no never-tagged module\n",
		*version, time.Since(r.t0).Seconds())
	return nil
}

// cleanup removes the temporary directory; the module caches in it are
// read-only, so it is made writable first.
func cleanup(tmp string) error {
	_ = filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	return os.RemoveAll(tmp)
}
