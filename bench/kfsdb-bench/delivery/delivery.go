// Package delivery names the ways `kfsdb-bench work`, `kfsdb-bench bench` and the
// demo get attempts to their workers, parses and checks the --delivery flag
// and its companions (Check, the one check every command and loadgen
// runs), and connects to NATS for the nats mode.
package delivery

import (
	"errors"
	"fmt"
	"time"
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
	// NATS: the relay publishes outbox rows to a NATS JetStream stream
	// (module adapters/natsjs) and workers receive from its durable
	// consumer. Needs a NATS URL (--nats-url).
	NATS Mode = "nats"
)

// Default is the mode used when none is given.
const Default = Postgres

// ErrUnknown is returned by Parse for anything but the three modes.
var ErrUnknown = errors.New("unknown delivery")

// Parse returns the mode s names ("" is Default).
func Parse(s string) (Mode, error) {
	switch Mode(s) {
	case "":
		return Default, nil
	case Postgres, Relay, NATS:
		return Mode(s), nil
	}
	return "", fmt.Errorf("%w %q: want %q, %q or %q", ErrUnknown, s, Postgres, Relay, NATS)
}

// Check is the one check of a delivery choice: it parses m ("" is
// Default), checks natsURL against it (CheckNATS) and the source's
// pollInterval (CheckPollInterval; 0 for none), and returns the mode. Its
// errors are those of an options struct's Validate: "invalid options: "
// and the field at fault, Delivery, NATSURL or PollInterval.
func Check(m Mode, natsURL string, pollInterval time.Duration) (Mode, error) {
	mode, err := Parse(string(m))
	if err != nil {
		return "", fmt.Errorf("invalid options: Delivery: %w", err)
	}
	if err := CheckNATS(mode, natsURL); err != nil {
		return "", fmt.Errorf("invalid options: NATSURL: %w", err)
	}
	if err := CheckPollInterval(mode, pollInterval); err != nil {
		return "", fmt.Errorf("invalid options: PollInterval: %w", err)
	}
	return mode, nil
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
		return fmt.Errorf("%w \"\": want %q, %q or %q", ErrUnknown, Postgres, Relay, NATS)
	}
	v, err := Parse(s)
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Type implements pflag.Value: the word `--help` shows for the flag's
// value.
func (m *Mode) Type() string { return "mode" }

// CheckPollInterval checks a source poll interval against mode m: only
// the postgres delivery has a source that polls (its fetches), so only it
// takes one, and never a negative one. Zero means LISTEN/NOTIFY.
func CheckPollInterval(m Mode, d time.Duration) error {
	switch {
	case d < 0:
		return fmt.Errorf("poll interval must not be negative, got %s", d)
	case d > 0 && m != Postgres:
		return fmt.Errorf("a poll interval applies to the %s delivery only (its source's wake-up), got delivery %s", Postgres, m.String())
	}
	return nil
}

// Usage is the --delivery flag's help text.
const Usage = "how attempts reach workers: postgres (workers lease straight from the outbox), relay (relay → in-process queue → workers) or nats (relay → NATS JetStream → workers; needs --nats-url)"
