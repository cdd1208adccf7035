package migrate

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSource(t *testing.T) {
	t.Parallel()
	s, err := parseSource("00007_x.sql", "-- about\n\n-- +goose Up\n-- +goose StatementBegin\nDO $$ BEGIN END $$;\n-- +goose StatementEnd\nCREATE TABLE t (id int);\n\n-- +goose Down\nDROP TABLE t;\n")
	require.NoError(t, err)
	require.EqualValues(t, 7, s.version)
	require.Equal(t, "-- about", s.preamble)
	require.Equal(t, "-- +goose StatementBegin\nDO $$ BEGIN END $$;\n-- +goose StatementEnd\nCREATE TABLE t (id int);", s.up)
	require.Equal(t, "DROP TABLE t;", s.down)

	for name, tc := range map[string]struct{ file, text, wantErr string }{
		"NoVersion":     {"x.sql", "-- +goose Up\nSELECT 1;\n-- +goose Down\nSELECT 1;\n", "must start with a positive version"},
		"ZeroVersion":   {"00000_x.sql", "-- +goose Up\nSELECT 1;\n-- +goose Down\nSELECT 1;\n", "must start with a positive version"},
		"NoDown":        {"00001_x.sql", "-- +goose Up\nSELECT 1;\n", "needs both"},
		"DownFirst":     {"00001_x.sql", "-- +goose Down\nSELECT 1;\n-- +goose Up\nSELECT 1;\n", "'-- +goose Down' must come once, after"},
		"TwoUps":        {"00001_x.sql", "-- +goose Up\n-- +goose Up\nSELECT 1;\n-- +goose Down\nSELECT 1;\n", "'-- +goose Up' must come once"},
		"EmptyUp":       {"00001_x.sql", "-- +goose Up\n-- +goose Down\nSELECT 1;\n", "must not be empty"},
		"NoTransaction": {"00001_x.sql", "-- +goose NO TRANSACTION\n-- +goose Up\nSELECT 1;\n-- +goose Down\nSELECT 1;\n", `annotation "-- +goose NO TRANSACTION" is not supported`},
		"Envsub":        {"00001_x.sql", "-- +goose Up\n-- +goose ENVSUB ON\nSELECT 1;\n-- +goose Down\nSELECT 1;\n", `annotation "-- +goose ENVSUB ON" is not supported`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := parseSource(tc.file, tc.text)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// TestSQL: the export covers the versions after from, up oldest first and
// down newest first, and refuses a from that names no migration.
func TestSQL(t *testing.T) {
	t.Parallel()
	srcs, err := sources()
	require.NoError(t, err)
	latest := srcs[len(srcs)-1].version

	up, err := SQL(DirectionUp, 0)
	require.NoError(t, err)
	last := -1
	for _, s := range srcs {
		i := strings.Index(up, fmt.Sprintf("-- kfsdb migration %d up: %s\n", s.version, s.name))
		require.Greater(t, i, last, "%s in order", s.name)
		last = i
		require.Contains(t, up, s.up)
	}

	down, err := SQL(DirectionDown, SeedVersion)
	require.NoError(t, err)
	require.NotContains(t, down, "00006_")
	require.Less(t, strings.Index(down, "migration 9 down"), strings.Index(down, "migration 7 down"))

	none, err := SQL(DirectionUp, latest)
	require.NoError(t, err)
	require.Contains(t, none, "(no migration after version")

	_, err = SQL(DirectionUp, 5)
	require.ErrorContains(t, err, "--from 5 is not 0 or a migration version (1, 2, 3, 4, 6, 7, 8, 9)")
	_, err = SQL("sideways", 0)
	require.ErrorContains(t, err, `direction must be "up" or "down"`)
}
