package main

import (
	"archive/zip"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	modzip "golang.org/x/mod/zip"
)

// TreeFile is one file of a commit (or of the index), as a module zip
// sees it: a path relative to its module's directory, a mode and its
// content on demand. It implements golang.org/x/mod/zip.File.
type TreeFile struct {
	path string
	mode fs.FileMode
	size int64
	open func() (io.ReadCloser, error)
}

func (f TreeFile) Path() string                 { return f.path }
func (f TreeFile) Lstat() (os.FileInfo, error)  { return fileInfo{f}, nil }
func (f TreeFile) Open() (io.ReadCloser, error) { return f.open() }

type fileInfo struct{ f TreeFile }

func (fi fileInfo) Name() string       { return path.Base(fi.f.path) }
func (fi fileInfo) Size() int64        { return fi.f.size }
func (fi fileInfo) Mode() fs.FileMode  { return fi.f.mode }
func (fi fileInfo) ModTime() time.Time { return time.Time{} }
func (fi fileInfo) IsDir() bool        { return false }
func (fi fileInfo) Sys() any           { return nil }

// DataFile is a file of the given content, mode 0644.
func DataFile(p string, data []byte) TreeFile {
	return TreeFile{path: p, mode: 0o644, size: int64(len(data)), open: func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}}
}

// ArchiveTree is every file of commit rev, read as the go command reads a
// module from git: `git archive --format=zip` with the same line-ending
// settings (so export-ignore and export-subst apply as they will for the
// proxy), keyed by path in the repository.
func ArchiveTree(repo, rev string) (map[string]TreeFile, error) {
	cmd := exec.Command("git", "-c", "core.autocrlf=input", "-c", "core.eol=lf", "archive", "--format=zip", rev)
	cmd.Dir = repo
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("git archive %s in %s: %v: %s", rev, repo, err, strings.TrimSpace(stderr.String()))
	}
	zr, err := zip.NewReader(bytes.NewReader(out.Bytes()), int64(out.Len()))
	if err != nil {
		return nil, fmt.Errorf("reading git archive of %s: %w", rev, err)
	}
	tree := map[string]TreeFile{}
	for _, zf := range zr.File {
		if strings.HasSuffix(zf.Name, "/") {
			continue
		}
		tree[zf.Name] = TreeFile{path: zf.Name, mode: zf.Mode(), size: int64(zf.UncompressedSize64), open: zf.Open}
	}
	return tree, nil
}

// IndexTree is every tracked path of the repository's index (git ls-files),
// with its mode and size from the work tree; a tracked file missing from
// the work tree is kept as an empty regular file, so its path is still
// checked.
func IndexTree(repo string) (map[string]TreeFile, error) {
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %w", repo, err)
	}
	tree := map[string]TreeFile{}
	for _, p := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if p == "" {
			continue
		}
		full := filepath.Join(repo, filepath.FromSlash(p))
		f := TreeFile{path: p, mode: 0o644, open: func() (io.ReadCloser, error) { return os.Open(full) }}
		if info, err := os.Lstat(full); err == nil {
			f.mode, f.size = info.Mode(), info.Size()
		}
		tree[p] = f
	}
	return tree, nil
}

// GoModDirs are the directories of tree holding a go.mod, "." for the
// root, sorted.
func GoModDirs(tree map[string]TreeFile) []string {
	var dirs []string
	for p := range tree {
		if path.Base(p) == "go.mod" {
			dirs = append(dirs, path.Dir(p))
		}
	}
	sort.Strings(dirs)
	return dirs
}

// ModuleFiles are the files of tree under module directory dir, with paths
// relative to it, as the go command hands them to the zip: files of a
// nested module are left for golang.org/x/mod/zip to omit, and a nested
// module without a LICENSE of its own gets the repository's (the go
// command does the same when it builds a module's zip from git).
func ModuleFiles(tree map[string]TreeFile, dir string) []modzip.File {
	var files []modzip.File
	haveLicense := false
	for p, f := range tree {
		rel := p
		if dir != "." {
			var ok bool
			if rel, ok = strings.CutPrefix(p, dir+"/"); !ok {
				continue
			}
		}
		f.path = rel
		files = append(files, f)
		if rel == "LICENSE" {
			haveLicense = true
		}
	}
	if lic, ok := tree["LICENSE"]; ok && !haveLicense && dir != "." {
		lic.path = "LICENSE"
		files = append(files, lic)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path() < files[j].Path() })
	return files
}

// CheckTree runs the module zip format's checks (golang.org/x/mod/zip's
// CheckFiles: module.CheckFilePath on each path, case-insensitive
// collisions, go.mod and LICENSE sizes, the zip's size limit) on every
// module of tree, released or not, and returns every refused file by its
// path in the repository.
func CheckTree(tree map[string]TreeFile) error {
	var errs PathErrors
	for _, dir := range GoModDirs(tree) {
		cf, _ := modzip.CheckFiles(ModuleFiles(tree, dir))
		for _, fe := range cf.Invalid {
			p := fe.Path
			if dir != "." {
				p = dir + "/" + p
			}
			errs = append(errs, &PathError{Path: p, Module: dir, Reason: fe.Err.Error()})
		}
		if cf.SizeError != nil {
			errs = append(errs, &PathError{Path: dir, Module: dir, Reason: cf.SizeError.Error()})
		}
	}
	if len(errs) > 0 {
		sort.Slice(errs, func(i, j int) bool { return errs[i].Path < errs[j].Path })
		return errs
	}
	return nil
}
