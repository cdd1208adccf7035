package httpguard

import (
	"net/http"
	"time"
)

// Timeouts bound each connection of a server: reading a request's
// headers, reading it whole, writing its response (set it above the
// handler's own limit) and idling between requests. A client that sends
// slowly, reads slowly or never sends again holds a connection only that
// long.
type Timeouts struct {
	ReadHeader, Read, Write, Idle time.Duration
}

// NewServer is an http.Server for h with every timeout of t.
func NewServer(h http.Handler, t Timeouts) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: t.ReadHeader, ReadTimeout: t.Read, WriteTimeout: t.Write, IdleTimeout: t.Idle}
}
