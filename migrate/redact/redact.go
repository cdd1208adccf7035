// Package redact removes passwords from text before kfsdb prints it: from
// URLs of any scheme (postgres, nats, tls, ws, wss, http...), NATS tokens
// (nats://TOKEN@host), keyword/value connection strings, and, given the DSN
// a command was called with, that DSN's literal password wherever it
// appears (a driver error may quote it out of context). The kfsdb command,
// the demo and the test harness (tests/pgtest) all redact through Text.
package redact

import (
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Mask replaces every redacted password.
const Mask = "xxxxx"

// minLiteralPassword is the shortest DSN password Text replaces wherever it
// appears: a shorter one would mangle unrelated text.
const minLiteralPassword = 4

var (
	kvPasswordRe  = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)
	urlPasswordRe = regexp.MustCompile(`(?i)([?&]password=)[^&\s]*`)
	// user:password@ after any scheme.
	urlUserinfoRe = regexp.MustCompile(`(?i)(\b[a-z][a-z0-9+.-]*://[^:@/\s]*:)[^@\s]*@`)
	// A NATS URL's user alone is a token (nats://TOKEN@host), and the
	// URLs of a NATS client list may be tls:// or ws(s)://.
	natsTokenRe = regexp.MustCompile(`(?i)(\b(?:nats|tls|wss?)://)[^:@/\s]+@`)
)

// Text returns s with every password replaced by [Mask]: those in URLs
// (postgres://user:secret@host/db, nats://user:secret@host,
// nats://TOKEN@host, wss://user:secret@host, ?password=secret) and in
// keyword/value
// strings (password=secret), also where s merely contains them, such as an
// error message; and, for each of dsns, its literal password wherever it
// appears, when it is at least 4 characters long. An empty or unparsable
// DSN adds nothing.
func Text(s string, dsns ...string) string {
	s = urlUserinfoRe.ReplaceAllString(s, "${1}"+Mask+"@")
	s = natsTokenRe.ReplaceAllString(s, "${1}"+Mask+"@")
	s = urlPasswordRe.ReplaceAllString(s, "${1}"+Mask)
	if !strings.Contains(s, "://") {
		s = kvPasswordRe.ReplaceAllString(s, "${1}"+Mask)
	}
	for _, dsn := range dsns {
		if pw := passwordOf(dsn); pw != "" {
			s = strings.ReplaceAll(s, pw, Mask)
		}
	}
	return s
}

// passwordOf returns dsn's password when it is long enough to replace
// literally, else "".
func passwordOf(dsn string) string {
	if dsn == "" {
		return ""
	}
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil || len(cfg.Password) < minLiteralPassword {
		return ""
	}
	return cfg.Password
}
