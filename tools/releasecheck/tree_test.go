package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// tree is a tree of files with the given paths, each holding its path.
func tree(paths ...string) map[string]TreeFile {
	t := map[string]TreeFile{}
	for _, p := range paths {
		t[p] = DataFile(p, []byte(p))
	}
	return t
}

func TestCheckTree(t *testing.T) {
	base := []string{"go.mod", "LICENSE", "repo/repo.go", "migrate/go.mod", "migrate/migrate.go", "tests/go.mod"}
	tests := []struct {
		name  string
		extra []string
		want  []PathError // Path, Module and a word of Reason
	}{
		{name: "kfsdb's layout is accepted"},
		{
			name:  "a Windows reserved name in the root module",
			extra: []string{"repo/testdata/fuzz/FuzzTruncateMessage/nul"},
			want:  []PathError{{Path: "repo/testdata/fuzz/FuzzTruncateMessage/nul", Module: ".", Reason: `"nul" disallowed`}},
		},
		{
			name:  "reserved names are refused whatever their case or extension; a longer name is not",
			extra: []string{"repo/testdata/COM1.txt", "repo/testdata/nul-byte", "repo/testdata/aux.go"},
			want: []PathError{
				{Path: "repo/testdata/COM1.txt", Module: ".", Reason: "disallowed"},
				{Path: "repo/testdata/aux.go", Module: ".", Reason: "disallowed"},
			},
		},
		{
			name:  "a file of a nested module is named by its path in the repository",
			extra: []string{"migrate/testdata/bad:name.sql"},
			want:  []PathError{{Path: "migrate/testdata/bad:name.sql", Module: "migrate", Reason: "invalid char"}},
		},
		{
			name:  "a never-tagged module is checked too",
			extra: []string{"tests/testdata/with space\x01"},
			want:  []PathError{{Path: "tests/testdata/with space\x01", Module: "tests", Reason: "invalid char"}},
		},
		{
			name:  "paths equal but for case collide in a zip",
			extra: []string{"repo/README.md", "repo/readme.md"},
			want:  []PathError{{Path: "repo/readme.md", Module: ".", Reason: "case-insensitive file name collision"}},
		},
		{
			name:  "a path whose element ends in a dot",
			extra: []string{"repo/x./y.go"},
			want:  []PathError{{Path: "repo/x./y.go", Module: ".", Reason: "trailing dot"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckTree(tree(append(append([]string{}, base...), tt.extra...)...))
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var got PathErrors
			if !errors.As(err, &got) {
				t.Fatalf("err = %v, want PathErrors", err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d refused paths, want %d:\n%v", len(got), len(tt.want), err)
			}
			for i, w := range tt.want {
				g := got[i]
				if g.Path != w.Path || g.Module != w.Module || !strings.Contains(g.Reason, w.Reason) {
					t.Errorf("refused[%d] = %+v, want path %q in module %q, reason with %q", i, *g, w.Path, w.Module, w.Reason)
				}
			}
			if !strings.Contains(err.Error(), tt.want[0].Path) {
				t.Errorf("message does not name %s:\n%v", tt.want[0].Path, err)
			}
		})
	}
}

func TestModuleFiles(t *testing.T) {
	tr := tree("go.mod", "LICENSE", "repo/repo.go", "migrate/go.mod", "migrate/m.go",
		"migrate/sub/s.go", "migrateextra/x.go", "adapters/prom/go.mod", "adapters/prom/LICENSE")
	paths := func(dir string) []string {
		var ps []string
		for _, f := range ModuleFiles(tr, dir) {
			ps = append(ps, f.Path())
		}
		return ps
	}
	// The root's list still holds nested modules' files: x/mod/zip omits them.
	if got, want := paths("migrate"), []string{"LICENSE", "go.mod", "m.go", "sub/s.go"}; !reflect.DeepEqual(got, want) {
		t.Errorf("migrate: %v, want %v (the repository's LICENSE added, migrateextra/ left out)", got, want)
	}
	if got, want := paths("adapters/prom"), []string{"LICENSE", "go.mod"}; !reflect.DeepEqual(got, want) {
		t.Errorf("adapters/prom: %v, want %v (its own LICENSE, once)", got, want)
	}
	for _, f := range ModuleFiles(tr, "adapters/prom") {
		if f.Path() == "LICENSE" {
			rc, _ := f.Open()
			data, _ := io.ReadAll(rc)
			if string(data) != "adapters/prom/LICENSE" {
				t.Errorf("adapters/prom's LICENSE is %q, want its own", data)
			}
		}
	}
}

func TestCheckModList(t *testing.T) {
	h := &rehearsal{version: "v0.1.0", r: &runner{out: io.Discard}}
	tests := []struct {
		name, list, wantErr string
	}{
		{name: "released modules at the version", list: "example.com/app\ngithub.com/knowledgefs/kfsdb v0.1.0\ngithub.com/knowledgefs/kfsdb/adapters/prom v0.1.0\ngithub.com/jackc/pgx/v5 v5.13.0\n"},
		{name: "the tests module", list: "example.com/app\ngithub.com/knowledgefs/kfsdb/tests v0.0.0\n", wantErr: "github.com/knowledgefs/kfsdb/tests, a kfsdb module that is never tagged"},
		{name: "another version", list: "example.com/app\ngithub.com/knowledgefs/kfsdb/migrate v0.0.0\n", wantErr: "want github.com/knowledgefs/kfsdb/migrate at v0.1.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := h.checkModList(tt.list)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestRewriteGoModOfTheRepository(t *testing.T) {
	// The repository's own released go.mods either rewrite or are refused
	// with a typed error naming the module (on main before issue 37, the
	// adapters' and the command's requirement of tests).
	for _, dir := range Released {
		data, err := readRepoFile(dir + "/go.mod")
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = RewriteGoMod(dir, data, "v0.1.0")
		var nt *NeverTaggedError
		if err != nil && !errors.As(err, &nt) {
			t.Errorf("%s: %v", dir, err)
		}
	}
}

func readRepoFile(p string) ([]byte, error) {
	return os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(p)))
}

func TestLineDiff(t *testing.T) {
	a := "module m\n\nrequire (\n\tx v0.0.0\n)\n\nreplace x => ../x\n"
	b := "module m\n\nrequire (\n\tx v0.1.0\n)\n"
	if got, want := lineDiff([]byte(a), []byte(b)), "+1 -2 lines; - replace x => ../x; - x v0.0.0; + x v0.1.0"; got != want {
		t.Errorf("lineDiff = %q, want %q (blank lines not counted)", got, want)
	}
}
