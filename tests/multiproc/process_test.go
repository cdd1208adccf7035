package multiproc_test

import (
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

// buildKfsdb builds cmd/kfsdb into a temporary directory (with -race when
// the test has it) and returns the binary's path.
func buildKfsdb(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kfsdb")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Dir = filepath.Join("..", "..", "cmd", "kfsdb")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build cmd/kfsdb:\n%s", out)
	return bin
}

// process is one running `kfsdb work`.
type process struct {
	id   string
	cmd  *exec.Cmd
	out  *testfactory.SyncBuffer
	done chan error
}

func startWork(t *testing.T, bin, url, id string) *process {
	t.Helper()
	p := &process{id: id, out: &testfactory.SyncBuffer{}, done: make(chan error, 1)}
	p.cmd = exec.Command(bin, "work", "--database-url", url, "--duration", "5m", "--workers", "2", "--concurrency", "2",
		"--lease", lease.String(), "--visibility", visibility.String(), "--step-delay", stepDelay.String(),
		"--fail-rate", strconv.FormatFloat(failRate, 'f', -1, 64), "--id", id)
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

// stop interrupts the process (SIGINT, like Ctrl-C) and requires a clean
// exit.
func (p *process) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-p.done:
		require.NoError(t, err, "kfsdb work %s:\n%s", p.id, p.out.String())
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		require.FailNow(t, "kfsdb work did not stop within 60 s", "%s:\n%s", p.id, p.out.String())
	}
}

var counterRe = regexp.MustCompile(`(?m)^\s+([a-z_]+)\s+(\d+)$`)

// counters parses the counters `kfsdb work` printed at the end.
func (p *process) counters() map[string]int64 {
	m := map[string]int64{}
	for _, sub := range counterRe.FindAllStringSubmatch(p.out.String(), -1) {
		n, _ := strconv.ParseInt(sub[2], 10, 64)
		m[sub[1]] = n
	}
	return m
}
