package consolehttp_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/console"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/httpguard"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// frozenThrottle is a throttle whose clock never moves unless told: what
// it counts does not depend on how fast the test runs.
func frozenThrottle() (*httpguard.Throttle, func(time.Duration)) {
	var mu sync.Mutex
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	th := httpguard.NewThrottle(&httpguard.ThrottleOptions{Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	return th, func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
}

// TestLoginsFromOthersNeverLockTheOperator is issue 39's N2 and N9: 130
// wrong logins from 12 addresses (behind the trusted proxy) lock those
// addresses, not a 13th: its login, a bearer client and an existing
// session go on; behind a proxy the console does not trust (every client
// one address) the right token still logs in; an auth proxy's
// Authorization: Basic is no guess. The refusals write RefusalLogBurst
// lines, then one that counts the rest.
func TestLoginsFromOthersNeverLockTheOperator(t *testing.T) {
	b := setup(t)
	var logs testfactory.SyncBuffer
	th, advance := frozenThrottle()
	base := b.start(t, console.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Throttle: th,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")}})
	from := func(ip string) map[string]string {
		return map[string]string{"Authorization": "", "X-Forwarded-For": ip}
	}
	session := cookieOf(t, do(t, http.MethodPost, base+"/login", url.Values{"token": {testToken}}, from("10.0.0.99")))

	codes := map[int]int{}
	for i := range 130 {
		res := do(t, http.MethodPost, base+"/login", url.Values{"token": {fmt.Sprintf("wrong-%d-%s", i, testToken)}}, from(fmt.Sprintf("10.0.0.%d", i%12+1)))
		codes[res.status]++
	}
	// Each address's first ThrottleFree+1 wrong logins are 401, the rest
	// wait (429).
	free := 12 * (httpguard.ThrottleFree + 1)
	require.Equal(t, map[int]int{http.StatusUnauthorized: free, http.StatusTooManyRequests: 130 - free}, codes)

	require.Equal(t, http.StatusSeeOther, do(t, http.MethodPost, base+"/login", url.Values{"token": {testToken}}, from("10.0.0.13")).status,
		"the right token from a 13th address")
	require.Equal(t, http.StatusOK, do(t, http.MethodGet, base+"/", nil, map[string]string{"X-Forwarded-For": "10.0.0.13"}).status, "a bearer client")
	require.Equal(t, http.StatusOK, do(t, http.MethodGet, base+"/", nil, map[string]string{"Cookie": session, "X-Forwarded-For": "10.0.0.1"}).status,
		"an existing session, even from a guessing address")
	require.Equal(t, http.StatusSeeOther, do(t, http.MethodPost, base+"/login", url.Values{"token": {testToken}}, from("10.0.0.1")).status,
		"the right token from a guessing address: it may be the operator's too")
	require.Equal(t, http.StatusTooManyRequests, do(t, http.MethodGet, base+"/", nil, map[string]string{"Authorization": "Bearer wrong-" + testToken, "X-Forwarded-For": "10.0.0.1"}).status,
		"a wrong bearer token from a guessing address waits")

	// One line per refusal at most, RefusalLogBurst a second: 131
	// refusals in one (frozen) second wrote that many, and the next
	// second's first says how many it did not.
	refused := regexp.MustCompile(`msg=audit .*action=login .*result=refused`)
	require.Len(t, refused.FindAllString(logs.String(), -1), httpguard.RefusalLogBurst)
	require.NotContains(t, logs.String(), "console: login failed")
	require.NotContains(t, logs.String(), "console: wrong bearer token")
	advance(httpguard.RefusalLogWindow)
	do(t, http.MethodPost, base+"/login", url.Values{"token": {"wrong-" + testToken}}, from("10.0.0.50"))
	require.Contains(t, logs.String(), fmt.Sprintf(`msg="refusals not logged" server=console count=%d`, 131-httpguard.RefusalLogBurst))

	// Behind a proxy the console was not told to trust, every client has
	// the proxy's address: guesses there never lock the operator out.
	th2, _ := frozenThrottle()
	untrusted := b.start(t, console.Config{Throttle: th2})
	for i := range 130 {
		do(t, http.MethodPost, untrusted+"/login", url.Values{"token": {fmt.Sprintf("wrong-%d-%s", i, testToken)}}, from("192.0.2.1"))
	}
	require.Equal(t, http.StatusTooManyRequests, do(t, http.MethodPost, untrusted+"/login", url.Values{"token": {"wrong-" + testToken}}, nil).status)
	require.Equal(t, http.StatusSeeOther, do(t, http.MethodPost, untrusted+"/login", url.Values{"token": {testToken}}, map[string]string{"Authorization": ""}).status)
	require.Equal(t, http.StatusOK, get(t, untrusted+"/").status, "a bearer client")
}

// TestBasicAuthIsNoGuess: an auth proxy in front of the console that
// forwards its own Authorization: Basic header feeds no failure counter
// (issue 39's N2): the header is ignored and the session cookie decides.
func TestBasicAuthIsNoGuess(t *testing.T) {
	b := setup(t)
	th, _ := frozenThrottle()
	base := b.start(t, console.Config{Throttle: th})
	basic := map[string]string{"Authorization": "Basic dXNlcjpwYXNz"}
	for range 3 * httpguard.ThrottleFree {
		require.Equal(t, http.StatusUnauthorized, do(t, http.MethodGet, base+"/", nil, basic).status)
	}
	require.Equal(t, http.StatusUnauthorized, do(t, http.MethodGet, base+"/", nil, map[string]string{"Authorization": "Bearer wrong-" + testToken}).status,
		"the Basic headers were not counted: the first wrong bearer token is free")
	// do drops Authorization when it sends a cookie: send both here.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Basic dXNlcjpwYXNz")
	req.Header.Set("Cookie", login(t, base, testToken))
	res, err := noRedirects.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode, "a session behind an auth proxy")
}
