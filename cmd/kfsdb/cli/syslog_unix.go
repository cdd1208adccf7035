//go:build !windows && !plan9

package cli

import (
	"fmt"
	"io"
	"log/syslog"
)

// dialSyslog connects to the local syslog (never a remote one), facility
// authpriv, tag kfsdb: each audit line is one message.
func dialSyslog() (io.WriteCloser, error) {
	w, err := syslog.New(syslog.LOG_AUTHPRIV|syslog.LOG_NOTICE, "kfsdb")
	if err != nil {
		return nil, fmt.Errorf("--audit-syslog: this host has no local syslog to write to (none listens on /dev/log, /var/run/syslog or /var/run/log): %w", err)
	}
	return w, nil
}
