package faultload

import (
	"fmt"
	"testing"
)

// collect runs check, written for a test (testfactory's Require*
// helpers), and returns its failures instead of failing a test: a run
// across an asynchronous failover counts what it finds. A FailNow ends
// check there, as it would end a test.
func collect(check func(t testing.TB)) (failures []string) {
	c := &collector{}
	func() {
		defer func() {
			if v := recover(); v != nil && v != errFailNow {
				c.failures = append(c.failures, fmt.Sprintf("panic: %v", v))
			}
		}()
		check(c)
	}()
	return c.failures
}

// errFailNow is what a collector's FailNow panics with.
var errFailNow = &struct{ string }{"faultload: FailNow"}

// collector is a testing.TB that records failures. Only what the
// require and testfactory helpers call is implemented; anything else
// panics on the nil TB it embeds, and collect records that.
type collector struct {
	testing.TB
	failures []string
}

func (c *collector) Helper()      {}
func (c *collector) Name() string { return "faultload" }
func (c *collector) Errorf(format string, args ...any) {
	c.failures = append(c.failures, fmt.Sprintf(format, args...))
}
func (c *collector) Error(args ...any)                 { c.failures = append(c.failures, fmt.Sprint(args...)) }
func (c *collector) Fail()                             { c.failures = append(c.failures, "failed") }
func (c *collector) FailNow()                          { panic(errFailNow) }
func (c *collector) Failed() bool                      { return len(c.failures) > 0 }
func (c *collector) Fatalf(format string, args ...any) { c.Errorf(format, args...); c.FailNow() }
func (c *collector) Fatal(args ...any)                 { c.Error(args...); c.FailNow() }
func (c *collector) Logf(string, ...any)               {}
func (c *collector) Log(...any)                        {}
