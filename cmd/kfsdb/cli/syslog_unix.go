//go:build !windows && !plan9

package cli

import (
	"fmt"
	"io"
	"log/syslog"
)

// syslogPriority is every audit message's facility and severity.
const syslogPriority = syslog.LOG_AUTHPRIV | syslog.LOG_NOTICE

// syslogNew opens the local syslog: log/syslog's own search of /dev/log,
// /var/run/syslog and /var/run/log. A test points it at a socket of its
// own.
var syslogNew = func() (io.WriteCloser, error) { return syslog.New(syslogPriority, "kfsdb") }

// dialSyslog connects to the local syslog (never a remote one), facility
// authpriv, tag kfsdb: each audit line is one message.
func dialSyslog() (io.WriteCloser, error) {
	w, err := syslogNew()
	if err != nil {
		return nil, fmt.Errorf("--audit-syslog: this host has no local syslog to write to (none listens on /dev/log, /var/run/syslog or /var/run/log): %w", err)
	}
	return w, nil
}
