package delivery

import (
	"errors"
	"flag"
	"io"
	"testing"
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
