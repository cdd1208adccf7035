package console

import (
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"
)

// TestParseAge: ages are Go durations or whole days, positive.
// Mutation: dropping the days branch fails "7d".
func TestParseAge(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 0, "90s": 90 * time.Second, "2h": 2 * time.Hour, "7d": 7 * 24 * time.Hour} {
		got, err := parseAge("older", in)
		if err != nil || got != want {
			t.Errorf("parseAge(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"0", "-1h", "0d", "-2d", "d", "1.5d", "soon", "99999999d"} {
		if _, err := parseAge("older", in); err == nil {
			t.Errorf("parseAge(%q) accepted", in)
		}
	}
}

// TestFilterRoundTrip: a filter written out as the list's links and the
// bulk forms write it reads back as the same filter, whatever the
// spelling it was first given in. Mutation: filterValues writing ages
// in another unit than parseAge reads fails it.
func TestFilterRoundTrip(t *testing.T) {
	s := &Server{cfg: Config{}}
	r := httptest.NewRequest("GET", "/attempts?tenant=acme&state=failed&state=queued&older=2h&newer=7d&error=E&space=0190a0e5-0000-7000-8000-000000000001", nil)
	f, _, err := s.filterOf(r)
	if err != nil {
		t.Fatal(err)
	}
	again, _, err := s.filterOf(httptest.NewRequest("GET", "/attempts?"+filterValues(f, "acme").Encode(), nil))
	if err != nil {
		t.Fatal(err)
	}
	if f.String() != again.String() {
		t.Fatalf("%q read back as %q", f.String(), again.String())
	}
	confined := &Server{cfg: Config{TenantID: "acme"}}
	if _, _, err := confined.filterOf(httptest.NewRequest("GET", "/attempts?tenant=globex", nil)); err == nil {
		t.Fatal("a confined console read another tenant's filter")
	}
}

// TestPagesParse: every page's template parses (New parses them too).
func TestPagesParse(t *testing.T) {
	if _, err := parsePages(); err != nil {
		t.Fatal(err)
	}
}

// testLogger fails the test on any log line (a template error is one).
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(failWriter{t}, nil))
}

type failWriter struct{ t *testing.T }

func (w failWriter) Write(p []byte) (int, error) {
	w.t.Errorf("log: %s", p)
	return len(p), nil
}
