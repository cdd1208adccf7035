package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/sumdb/dirhash"
	modzip "golang.org/x/mod/zip"
)

// Sums are a module version's two go.sum hashes.
type Sums struct {
	Zip   string // h1: of the module zip's files
	GoMod string // h1: of its go.mod
}

// GoSumLines are the go.sum lines that name module path at version v.
func (s Sums) GoSumLines(path, v string) string {
	return fmt.Sprintf("%s %s %s\n%s %s/go.mod %s\n", path, v, s.Zip, path, v, s.GoMod)
}

// Publish writes module path at version v, made of files, into the file
// module proxy at dir (GOPROXY=file://dir): @v/list, .info, .mod and .zip.
// The zip is made by golang.org/x/mod/zip, which refuses what the go
// command would refuse; a refused file is reported by name (PathErrors,
// with paths relative to the module's directory moddir in the repository).
func Publish(dir, moddir, path, v string, files []modzip.File, goMod []byte, at time.Time) (Sums, error) {
	if cf, err := modzip.CheckFiles(files); err != nil {
		var errs PathErrors
		for _, fe := range cf.Invalid {
			errs = append(errs, &PathError{Path: joinRepo(moddir, fe.Path), Module: moddir, Reason: fe.Err.Error()})
		}
		if len(errs) == 0 {
			return Sums{}, fmt.Errorf("module %s: %w", moddir, err)
		}
		return Sums{}, errs
	}
	escaped, err := module.EscapePath(path)
	if err != nil {
		return Sums{}, err
	}
	vdir := filepath.Join(dir, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return Sums{}, err
	}
	zipPath := filepath.Join(vdir, v+".zip")
	zf, err := os.Create(zipPath)
	if err != nil {
		return Sums{}, err
	}
	err = modzip.Create(zf, module.Version{Path: path, Version: v}, files)
	if cerr := zf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Sums{}, fmt.Errorf("module %s: %w", moddir, err)
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{v, at.UTC()})
	if err != nil {
		return Sums{}, err
	}
	for name, data := range map[string][]byte{
		v + ".mod":  goMod,
		v + ".info": info,
		"list":      []byte(v + "\n"),
	} {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
			return Sums{}, err
		}
	}
	return ZipSums(zipPath, goMod)
}

// ZipSums are the go.sum hashes of the module zip at zipPath and of goMod,
// computed as the go command computes them.
func ZipSums(zipPath string, goMod []byte) (Sums, error) {
	h, err := dirhash.HashZip(zipPath, dirhash.Hash1)
	if err != nil {
		return Sums{}, err
	}
	hm, err := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(goMod)), nil
	})
	if err != nil {
		return Sums{}, err
	}
	return Sums{Zip: h, GoMod: hm}, nil
}

func joinRepo(moddir, p string) string {
	if moddir == "." {
		return p
	}
	return moddir + "/" + p
}

// errNoGoMod is a released module directory whose go.mod is not in the
// commit.
