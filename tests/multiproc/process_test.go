package multiproc_test

import (
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// buildKfsdbBench builds bench/kfsdb-bench, whose work command the
// processes run, into a temporary directory (with -race when the test has
// it) and returns the binary's path.
func buildKfsdbBench(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kfsdb-bench")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Dir = filepath.Join("..", "..", "bench", "kfsdb-bench")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build bench/kfsdb-bench:\n%s", out)
	return bin
}

// process is one running `kfsdb-bench work`.
type process struct {
	id   string
	cmd  *exec.Cmd
	out  *testfactory.SyncBuffer
	done chan error
}

// workFlags are the `kfsdb-bench work` flags a test picks; the others are fixed:
// two workers of two slots each, running until the test stops them.
type workFlags struct {
	delivery  string // postgres or relay
	lease     time.Duration
	stepDelay time.Duration
	failRate  float64
	extra     []string // the delivery's own flags (relay: --visibility)
}

// startWork starts `kfsdb-bench work` as id on the database at dbURL. Its
// sessions carry id as their application_name, so that the test can tell
// when they have ended (waitSessionsEnded).
func startWork(t *testing.T, bin, dbURL, id string, f *workFlags) *process {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	q := u.Query()
	q.Set("application_name", id)
	u.RawQuery = q.Encode()
	p := &process{id: id, out: &testfactory.SyncBuffer{}, done: make(chan error, 1)}
	args := []string{"work", "--database-url", u.String(), "--delivery", f.delivery, "--duration", "5m", "--workers", "2", "--concurrency", "2",
		"--lease", f.lease.String(), "--step-delay", f.stepDelay.String(), "--fail-rate", strconv.FormatFloat(f.failRate, 'f', -1, 64), "--id", id}
	p.cmd = exec.Command(bin, append(args, f.extra...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	require.NoError(t, p.cmd.Start())
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
		}
	})
	return p
}

// kill ends the process with SIGKILL, as a crash or the OOM killer would:
// it hands no lease back and prints no counters. It requires that the
// signal is what ended it.
func (p *process) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Kill())
	select {
	case err := <-p.done:
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "kfsdb-bench work %s:\n%s", p.id, p.out.String())
		ws, ok := exit.Sys().(syscall.WaitStatus)
		require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "kfsdb-bench work %s ended with %v, not SIGKILL", p.id, err)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "kfsdb-bench work did not die within 10 s of SIGKILL", p.id)
	}
}

// stop interrupts the process (SIGINT, like Ctrl-C) and requires a clean
// exit.
func (p *process) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-p.done:
		require.NoError(t, err, "kfsdb-bench work %s:\n%s", p.id, p.out.String())
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		require.FailNow(t, "kfsdb-bench work did not stop within 60 s", "%s:\n%s", p.id, p.out.String())
	}
}

var counterRe = regexp.MustCompile(`(?m)^\s+([a-z_]+)\s+(\d+)$`)

// counters parses the counters `kfsdb-bench work` printed at the end.
func (p *process) counters() map[string]int64 {
	m := map[string]int64{}
	for _, sub := range counterRe.FindAllStringSubmatch(p.out.String(), -1) {
		n, _ := strconv.ParseInt(sub[2], 10, 64)
		m[sub[1]] = n
	}
	return m
}
