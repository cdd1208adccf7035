package main

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

const devCmd = `// Module kfsdb is the deploy binary.
module github.com/knowledgefs/kfsdb/cmd/kfsdb

go 1.26.0

require (
	github.com/knowledgefs/kfsdb v0.0.0
	github.com/knowledgefs/kfsdb/adapters/prom v0.0.0
	github.com/spf13/cobra v1.10.2
)

require (
	github.com/knowledgefs/kfsdb/migrate v0.0.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)

replace (
	github.com/knowledgefs/kfsdb => ../..
	github.com/knowledgefs/kfsdb/adapters/prom => ../../adapters/prom
	github.com/knowledgefs/kfsdb/tests => ../../tests
)

replace github.com/knowledgefs/kfsdb/migrate => ../../migrate
`

func TestRewriteGoMod(t *testing.T) {
	tests := []struct {
		name     string
		dir      string
		gomod    string
		wantReq  map[string]string // module path → version in the rewritten go.mod
		indirect []string          // requirements still marked indirect
		wantDeps []string
		wantErr  any // a pointer to the typed error wanted, or nil
	}{
		{
			name: "siblings at the version, every local replace dropped, third parties untouched",
			dir:  "cmd/kfsdb", gomod: devCmd,
			wantReq: map[string]string{
				"github.com/knowledgefs/kfsdb":               "v0.1.0",
				"github.com/knowledgefs/kfsdb/adapters/prom": "v0.1.0",
				"github.com/knowledgefs/kfsdb/migrate":       "v0.1.0",
				"github.com/spf13/cobra":                     "v1.10.2",
				"golang.org/x/sys":                           "v0.50.0",
			},
			indirect: []string{"github.com/knowledgefs/kfsdb/migrate", "golang.org/x/sys"},
			wantDeps: []string{".", "adapters/prom", "migrate"},
		},
		{
			name:     "the root requires no sibling",
			dir:      ".",
			gomod:    "module github.com/knowledgefs/kfsdb\n\ngo 1.25.0\n\nrequire github.com/jackc/pgx/v5 v5.13.0\n",
			wantReq:  map[string]string{"github.com/jackc/pgx/v5": "v5.13.0"},
			wantDeps: nil,
		},
		{
			name:    "a released module requiring tests is refused by name",
			dir:     "adapters/prom",
			gomod:   "module github.com/knowledgefs/kfsdb/adapters/prom\n\ngo 1.26.0\n\nrequire (\n\tgithub.com/knowledgefs/kfsdb v0.0.0\n\tgithub.com/knowledgefs/kfsdb/tests v0.0.0\n)\n",
			wantErr: &NeverTaggedError{Module: "adapters/prom", Requires: "github.com/knowledgefs/kfsdb/tests"},
		},
		{
			name:    "an indirect requirement of a never-tagged module is refused too",
			dir:     "migrate",
			gomod:   "module github.com/knowledgefs/kfsdb/migrate\n\ngo 1.26.0\n\nrequire github.com/knowledgefs/kfsdb/bench/kfsdb-bench v0.0.0 // indirect\n",
			wantErr: &NeverTaggedError{Module: "migrate", Requires: "github.com/knowledgefs/kfsdb/bench/kfsdb-bench"},
		},
		{
			name:    "an unknown kfsdb module is refused",
			dir:     "migrate",
			gomod:   "module github.com/knowledgefs/kfsdb/migrate\n\ngo 1.26.0\n\nrequire github.com/knowledgefs/kfsdb/adapters/kafka v0.0.0\n",
			wantErr: &UnknownModuleError{Path: "github.com/knowledgefs/kfsdb/adapters/kafka"},
		},
		{
			name:    "a replace of a third-party module cannot be tagged",
			dir:     "migrate",
			gomod:   "module github.com/knowledgefs/kfsdb/migrate\n\ngo 1.26.0\n\nreplace github.com/pressly/goose/v3 => ../goose\n",
			wantErr: &ReplaceError{Module: "migrate", Old: "github.com/pressly/goose/v3", New: "../goose"},
		},
		{
			name:    "a replace of a sibling by a version cannot be tagged",
			dir:     "migrate",
			gomod:   "module github.com/knowledgefs/kfsdb/migrate\n\ngo 1.26.0\n\nreplace github.com/knowledgefs/kfsdb => github.com/fork/kfsdb v0.0.9\n",
			wantErr: &ReplaceError{Module: "migrate", Old: "github.com/knowledgefs/kfsdb", New: "github.com/fork/kfsdb v0.0.9"},
		},
		{
			name:    "a go.mod in the wrong directory is refused",
			dir:     "migrate",
			gomod:   "module github.com/knowledgefs/kfsdb/kfsdbtest\n\ngo 1.26.0\n",
			wantErr: errors.New("declares module"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, deps, err := RewriteGoMod(tt.dir, []byte(tt.gomod), "v0.1.0")
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("want an error, got none; go.mod:\n%s", out)
				}
				switch want := tt.wantErr.(type) {
				case *NeverTaggedError:
					var got *NeverTaggedError
					if !errors.As(err, &got) || *got != *want {
						t.Fatalf("err = %#v, want %#v", err, want)
					}
				case *UnknownModuleError:
					var got *UnknownModuleError
					if !errors.As(err, &got) || *got != *want {
						t.Fatalf("err = %#v, want %#v", err, want)
					}
				case *ReplaceError:
					var got *ReplaceError
					if !errors.As(err, &got) || *got != *want {
						t.Fatalf("err = %#v, want %#v", err, want)
					}
				case error:
					if !strings.Contains(err.Error(), want.Error()) {
						t.Fatalf("err = %v, want one saying %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(deps, tt.wantDeps) {
				t.Errorf("deps = %v, want %v", deps, tt.wantDeps)
			}
			f, err := modfile.Parse("go.mod", out, nil)
			if err != nil {
				t.Fatalf("rewritten go.mod does not parse: %v\n%s", err, out)
			}
			if len(f.Replace) != 0 {
				t.Errorf("rewritten go.mod keeps %d replace(s):\n%s", len(f.Replace), out)
			}
			got := map[string]string{}
			var indirect []string
			for _, r := range f.Require {
				got[r.Mod.Path] = r.Mod.Version
				if r.Indirect {
					indirect = append(indirect, r.Mod.Path)
				}
			}
			if !reflect.DeepEqual(got, tt.wantReq) {
				t.Errorf("requires = %v, want %v\n%s", got, tt.wantReq, out)
			}
			if !reflect.DeepEqual(indirect, tt.indirect) {
				t.Errorf("indirect = %v, want %v", indirect, tt.indirect)
			}
			// Rewriting the tagged go.mod again changes nothing: the release
			// commit rehearses as it is.
			again, _, err := RewriteGoMod(tt.dir, out, "v0.1.0")
			if err != nil || string(again) != string(out) {
				t.Errorf("rewriting again: err %v, changed:\n%s\n---\n%s", err, out, again)
			}
		})
	}
}

func TestTagOrder(t *testing.T) {
	tests := []struct {
		name    string
		deps    map[string][]string
		want    []string
		wantErr []string // the modules of a CycleError
	}{
		{
			name: "kfsdb's graph: each after what it requires, ties in the listed order",
			deps: map[string][]string{
				".": nil, "migrate": {"."}, "kfsdbtest": {".", "migrate"},
				"adapters/natsjs": {"."}, "adapters/prom": {"."}, "adapters/otel": {"."},
				"cmd/kfsdb": {".", "adapters/prom", "migrate"},
			},
			want: []string{".", "migrate", "kfsdbtest", "adapters/natsjs", "adapters/prom", "adapters/otel", "cmd/kfsdb"},
		},
		{
			name: "a requirement listed later comes first",
			deps: map[string][]string{".": {"cmd/kfsdb"}, "cmd/kfsdb": nil},
			want: []string{"cmd/kfsdb", "."},
		},
		{
			name:    "a cycle is refused, naming its modules",
			deps:    map[string][]string{".": nil, "migrate": {"kfsdbtest"}, "kfsdbtest": {"migrate"}},
			wantErr: []string{"migrate", "kfsdbtest"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := TagOrder(tt.deps)
			if tt.wantErr != nil {
				var ce *CycleError
				if !errors.As(err, &ce) || !reflect.DeepEqual(ce.Modules, tt.wantErr) {
					t.Fatalf("err = %v, want a cycle of %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("TagOrder = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestCheckModuleDirs(t *testing.T) {
	all := append(append([]string{}, Released...), NeverTagged...)
	if err := CheckModuleDirs(all); err != nil {
		t.Fatalf("kfsdb's modules: %v", err)
	}
	var ue *UnknownModuleError
	if err := CheckModuleDirs(append(all, "adapters/kafka")); !errors.As(err, &ue) || ue.Path != "adapters/kafka" {
		t.Fatalf("a new module: err = %v, want UnknownModuleError naming adapters/kafka", err)
	}
	var noMigrate []string
	for _, d := range all {
		if d != "migrate" {
			noMigrate = append(noMigrate, d)
		}
	}
	if err := CheckModuleDirs(noMigrate); err == nil || !strings.Contains(err.Error(), "migrate") {
		t.Fatalf("a listed module gone: err = %v, want one naming it", err)
	}
}

func TestTag(t *testing.T) {
	for dir, want := range map[string]string{".": "v0.1.0", "migrate": "migrate/v0.1.0", "adapters/otel": "adapters/otel/v0.1.0"} {
		if got := Tag(dir, "v0.1.0"); got != want {
			t.Errorf("Tag(%q) = %q, want %q", dir, got, want)
		}
	}
}
