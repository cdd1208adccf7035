package delivery

import (
	"errors"
	"flag"
	"io"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Mode{"": Postgres, "postgres": Postgres, "relay": Relay, "nats": NATS} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"Postgres", "NATS", " relay", "pg"} {
		if _, err := Parse(in); !errors.Is(err, ErrUnknown) {
			t.Errorf("Parse(%q) error = %v; want ErrUnknown", in, err)
		}
	}
}

func TestCheckPollInterval(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		m      Mode
		d      time.Duration
		wantOK bool
	}{
		{Postgres, 0, true}, {Postgres, time.Millisecond, true}, {Relay, 0, true}, {NATS, 0, true},
		{Postgres, -time.Millisecond, false}, {Relay, time.Millisecond, false}, {NATS, time.Second, false},
	} {
		if err := CheckPollInterval(tc.m, tc.d); (err == nil) != tc.wantOK {
			t.Errorf("CheckPollInterval(%s, %s) = %v; want ok %v", tc.m, tc.d, err, tc.wantOK)
		}
	}
}

func TestFlag(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var m Mode
	fs.Var(&m, "delivery", Usage)
	if err := fs.Parse(nil); err != nil || m.String() != "postgres" {
		t.Fatalf("default: %q, %v", m.String(), err)
	}
	if err := fs.Parse([]string{"--delivery", "relay"}); err != nil || m != Relay {
		t.Fatalf("relay: %q, %v", m, err)
	}
	for _, bad := range []string{"kafka", ""} {
		if err := fs.Parse([]string{"--delivery", bad}); err == nil {
			t.Fatalf("--delivery %q parsed", bad)
		}
	}
}
