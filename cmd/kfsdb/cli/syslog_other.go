//go:build windows || plan9

package cli

import (
	"errors"
	"io"
)

// dialSyslog refuses: Go's log/syslog has no local syslog here.
func dialSyslog() (io.WriteCloser, error) {
	return nil, errors.New("--audit-syslog: there is no local syslog on this system; use --audit-file")
}
