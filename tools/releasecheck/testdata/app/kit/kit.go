// Package kit holds an application's test on kfsdb's test kit, as the
// README shows it; the rehearsal compiles it (go test -c) and never runs it.
package kit
