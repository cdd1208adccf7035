package redact

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTextRedactsURLsAndKeywordValueStrings(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://u:pw@h:5432/db?sslmode=disable": "postgres://u:xxxxx@h:5432/db?sslmode=disable",
		"postgresql://u@h/db?password=pw&x=1":       "postgresql://u@h/db?password=xxxxx&x=1",
		"host=h user=u password=pw dbname=d":        "host=h user=u password=xxxxx dbname=d",
		"host=h password='p w' dbname=d":            "host=h password=xxxxx dbname=d",
		"connect postgres://u:pw@h/db: refused":     "connect postgres://u:xxxxx@h/db: refused",
		"postgres://u@h/db":                         "postgres://u@h/db",
		"dial nats://user:secret@h:4222: refused":   "dial nats://user:xxxxx@h:4222: refused",
		"nats://s3cr3t-token@h:4222":                "nats://xxxxx@h:4222",
		"tls://u:pw@h:4443, wss://tok@h/ws":         "tls://u:xxxxx@h:4443, wss://xxxxx@h/ws",
		"ws://u:pw@h:8080 and https://u:pw@h/x":     "ws://u:xxxxx@h:8080 and https://u:xxxxx@h/x",
		"nats://h:4222":                             "nats://h:4222",
	} {
		require.Equal(t, want, Text(in))
	}
}

func TestTextRedactsTheDSNsLiteralPassword(t *testing.T) {
	t.Parallel()
	const dsn = "postgres://u:s3cr3t@h/db"
	require.Equal(t, `auth failed for "xxxxx"`, Text(`auth failed for "s3cr3t"`, dsn))
	require.Equal(t, "a pw b", Text("a pw b", "postgres://u:pw@h/db"), "passwords under 4 characters are only redacted in URLs")
	require.Equal(t, "s3cr3t", Text("s3cr3t", "", "postgres://u@h:notaport/db"), "empty and unparsable DSNs add nothing")
}
