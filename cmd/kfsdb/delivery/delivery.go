// Package delivery names the two ways `kfsdb work`, `kfsdb bench` and the
// demo get attempts to their workers, and parses the --delivery flag.
package delivery

import (
	"errors"
	"fmt"
)

// Mode is how attempts reach workers.
type Mode string

const (
	// Postgres: each worker leases due attempts straight from the outbox
	// (pgsource, repo.FetchLeases); no relay, no broker. The default.
	Postgres Mode = "postgres"
	// Relay: the relay claims and publishes outbox rows to a broker (here
	// the in-process memqueue) and workers lease what they receive.
	Relay Mode = "relay"
)

// Default is the mode used when none is given.
const Default = Postgres

// ErrUnknown is returned by Parse for anything but the two modes.
var ErrUnknown = errors.New("unknown delivery")

// Parse returns the mode s names ("" is Default).
func Parse(s string) (Mode, error) {
	switch Mode(s) {
	case "":
		return Default, nil
	case Postgres, Relay:
		return Mode(s), nil
	}
	return "", fmt.Errorf("%w %q: want %q or %q", ErrUnknown, s, Postgres, Relay)
}

// String implements flag.Value.
func (m *Mode) String() string {
	if m == nil || *m == "" {
		return string(Default)
	}
	return string(*m)
}

// Set implements flag.Value. An empty value is refused: on a command line
// it is a mistake, not a request for the default.
func (m *Mode) Set(s string) error {
	if s == "" {
		return fmt.Errorf("%w \"\": want %q or %q", ErrUnknown, Postgres, Relay)
	}
	v, err := Parse(s)
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Usage is the --delivery flag's help text.
const Usage = "how attempts reach workers: postgres (workers lease straight from the outbox) or relay (relay → in-process queue → workers)"
