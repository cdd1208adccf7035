package cmdkit

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
)

// TestPrintRowEscapesEveryValue: a value holding a newline, an escape
// sequence or a bidi override prints as one escaped value on its line,
// whatever its type; the format's own newline stays.
func TestPrintRowEscapesEveryValue(t *testing.T) {
	t.Parallel()
	forged := "t\nFORGED 1 2 3\x1b[31m\u202e"
	var nilStr *string
	var buf bytes.Buffer
	PrintRow(&buf, "%-10s|%s|%s|%s|%s|%d\n", forged, &forged, kfstype.RunState(forged), errors.New(forged), nilStr, 7)
	want := `t\x0aFORGED 1 2 3\x1b[31m\u{202e}`
	require.Equal(t, strings.Join([]string{want, want, want, want, "-", "7"}, "|")+"\n", buf.String())
}
