package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// fleetWorkerApp is the application_name of every fleet worker's
// connections, so the connection counts see only theirs.
const fleetWorkerApp = "kfsdb-fleet-worker"

// workerProc is one `kfsdb-bench work` process of a fleet.
type workerProc struct {
	cmd *exec.Cmd
	out *testfactory.SyncBuffer
	// exited is closed when the process has exited, err then says how.
	exited chan struct{}
	err    error
}

// procSpec is how to run each process of a fleet.
type procSpec struct {
	bin, url                string
	workers, concurrency    int
	stepDelay, pollInterval time.Duration
	pollJitter              float64
	pollOnly                bool
	maxConns                int
	idPrefix                string
	// metrics: serve the process's counters on a loopback port of its
	// own (scrapeFleet reads them).
	metrics bool
}

// startFleet starts n processes and waits until each says it runs.
func startFleet(t *testing.T, n int, s procSpec) []*workerProc {
	t.Helper()
	url := s.url + "&application_name=" + fleetWorkerApp
	procs := make([]*workerProc, 0, n)
	for i := range n {
		args := []string{"work", "--database-url", url, "--duration", "24h", "--workers", strconv.Itoa(s.workers),
			"--concurrency", strconv.Itoa(s.concurrency), "--step-delay", s.stepDelay.String(), "--id", fmt.Sprintf("%s-%d", s.idPrefix, i)}
		if s.pollOnly {
			args = append(args, "--poll-only")
		}
		if s.pollInterval > 0 {
			args = append(args, "--poll-interval", s.pollInterval.String())
		}
		if s.pollJitter > 0 {
			args = append(args, "--poll-jitter", strconv.FormatFloat(s.pollJitter, 'g', -1, 64))
		}
		if s.maxConns > 0 {
			args = append(args, "--max-conns", strconv.Itoa(s.maxConns))
		}
		if s.metrics {
			args = append(args, "--metrics-listen", "127.0.0.1:0")
		}
		p := &workerProc{cmd: exec.Command(s.bin, args...), out: &testfactory.SyncBuffer{}, exited: make(chan struct{})}
		p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
		if err := p.cmd.Start(); err != nil {
			stopFleet(procs)
			t.Fatalf("start %s: %v", s.bin, err)
		}
		go func() { p.err = p.cmd.Wait(); close(p.exited) }()
		procs = append(procs, p)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for _, p := range procs {
		for !strings.Contains(p.out.String(), " running for ") {
			select {
			case <-p.exited:
				stopFleet(procs)
				t.Fatalf("a worker process exited at start (%v):\n%s", p.err, p.out.String())
			default:
			}
			if time.Now().After(deadline) {
				stopFleet(procs)
				t.Fatalf("a worker process did not start within 2 min:\n%s", p.out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return procs
}

// stopFleet interrupts every process (they print their counters as they
// stop) and waits for them, killing those still there after 30 s. Calling
// it again does nothing more.
func stopFleet(procs []*workerProc) {
	for _, p := range procs {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Signal(os.Interrupt)
		}
	}
	deadline := time.After(30 * time.Second)
	for _, p := range procs {
		select {
		case <-p.exited:
		case <-deadline:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
}

// counter reads a counter the process printed as it stopped (0 if absent).
func (p *workerProc) counter(name string) int64 {
	sc := bufio.NewScanner(strings.NewReader(p.out.String()))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == name {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// startBouncer runs Debian's pgbouncer in transaction pooling mode on a
// free loopback port in front of the server of serverURL, as tests/pgbouncer
// does, with pool server connections per database and user; stop ends it.
func startBouncer(t *testing.T, serverURL string, pool, maxClients int) (url func(db string) string, stop func()) {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/pgbouncer"); serr != nil {
			t.Fatal("pgbouncer is not installed (Debian/Ubuntu: apt-get install -y pgbouncer), or leave pgbouncer out of FLEET_MODES")
		}
		bin = "/usr/sbin/pgbouncer"
	}
	server, err := pgconn.ParseConfig(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil { // readable after pgbouncer drops root
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	config := fmt.Sprintf(`[databases]
* = host=%s port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
default_pool_size = %d
max_client_conn = %d
ignore_startup_parameters = extra_float_digits
logfile =
pidfile =
`, server.Host, server.Port, port, filepath.Join(dir, "userlist.txt"), pool, maxClients)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "userlist.txt"), fmt.Appendf(nil, "%q %q\n", server.User, server.Password), 0o644))
	must(os.WriteFile(filepath.Join(dir, "pgbouncer.ini"), []byte(config), 0o644))
	var args []string
	if os.Geteuid() == 0 {
		name := "nobody"
		if _, err := user.Lookup("postgres"); err == nil {
			name = "postgres"
		}
		args = append(args, "-u", name) // pgbouncer refuses to run as root
	}
	out := &testfactory.SyncBuffer{}
	cmd := exec.Command(bin, append(args, filepath.Join(dir, "pgbouncer.ini"))...)
	cmd.Stdout, cmd.Stderr = out, out
	must(cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("pgbouncer did not listen on 127.0.0.1:%d: %v\n%s", port, err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Transaction pooling shares server sessions between clients: no
	// named prepared statement may outlive a transaction (cache_describe
	// sends each statement unnamed, its parameter types described once).
	url = func(db string) string {
		return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/%s?sslmode=disable&default_query_exec_mode=cache_describe",
			server.User, server.Password, port, db)
	}
	return url, stop
}

// waitCtx is a context for one measurement step.
func waitCtx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
