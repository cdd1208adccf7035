package delivery

import (
	"errors"
	"flag"
	"io"
	"strings"
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

// TestCheck: the one check names the field at fault, as a Validate
// does, and returns the mode.
func TestCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		m       Mode
		natsURL string
		poll    time.Duration
		want    Mode
		wantErr string
	}{
		{"", "", 0, Postgres, ""},
		{Relay, "", 0, Relay, ""},
		{NATS, "nats://127.0.0.1:4222", 0, NATS, ""},
		{Postgres, "", time.Millisecond, Postgres, ""},
		{"kafka", "", 0, "", `Delivery: unknown delivery "kafka"`},
		{NATS, "", 0, "", "NATSURL: bad --nats-url: --delivery nats needs --nats-url"},
		{Relay, "nats://127.0.0.1:4222", 0, "", "NATSURL: bad --nats-url: --nats-url is for --delivery nats"},
		{Relay, "", time.Millisecond, "", "PollInterval: a poll interval applies to the postgres delivery only"},
	} {
		got, err := Check(tc.m, tc.natsURL, tc.poll)
		if tc.wantErr == "" {
			if err != nil || got != tc.want {
				t.Errorf("Check(%q, %q, %s) = %q, %v; want %q", tc.m, tc.natsURL, tc.poll, got, err, tc.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("Check(%q, %q, %s) error = %v; want %q", tc.m, tc.natsURL, tc.poll, err, tc.wantErr)
		}
	}
}
