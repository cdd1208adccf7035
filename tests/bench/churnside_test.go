package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/knowledgefs/kfsdb/bench/kfsdb-bench/loadgen"
	"github.com/knowledgefs/kfsdb/migrate"
	"github.com/knowledgefs/kfsdb/tests/scratch"
)

// churnSampling is what a sampled run (not the capacity run) records.
type churnSampling struct {
	minutes int
	hold    churnHold
	csv     *churnCSV
}

// churnSideResult is one side's run: its own unpaced throughput figure
// (the capacity run reads it) and the sampler's minutes.
type churnSideResult struct {
	throughput float64
	minutes    []churnMinute
}

// churnRunMargin lengthens a sampled side's run past its last sampled
// minute: the sampler's minute 0 starts at the first success it sees, a
// little after the side's own start, and its last minute must end under
// load.
const churnRunMargin = 10 * time.Second

// runSide runs one side (postgres: kfsdb's direct delivery through
// loadgen, in this process; floor and river: their binaries, which create
// their own database on the server) at rate (0: unpaced) for seconds, and,
// with sampling, samples its database every minute meanwhile. The side's
// output goes to CHURN_OUT/<variant>-<side>.log.
func (c *churnConfig) runSide(ctx context.Context, t *testing.T, side, variant string, rate float64, seconds int, sampling *churnSampling) (*churnSideResult, error) {
	run := time.Duration(seconds) * time.Second
	if sampling != nil {
		run += churnRunMargin
	}
	ctx, cancel := context.WithTimeout(ctx, run+churnTimeout)
	defer cancel()
	admin, err := pgx.Connect(ctx, c.adminURL)
	if err != nil {
		return nil, err
	}
	defer admin.Close(context.WithoutCancel(ctx))
	logf, err := os.Create(filepath.Join(c.out, variant+"-"+side+".log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()

	var (
		dbName   string
		prefix   string // the side names its own database prefix_<something>
		existing map[string]bool
		out      bytes.Buffer
		mu       sync.Mutex // out, written by the side's process, read after it ends
		sideErr  error
		tput     float64
		finished = make(chan struct{})
	)
	secs := strconv.Itoa(int(run.Seconds()))
	rateArg := strconv.FormatFloat(rate, 'f', -1, 64)
	switch side {
	case "postgres":
		dbName = scratch.RandomName("kfschurn")
		dbURL, err := env.srv.CreateDatabase(ctx, dbName, "")
		if err != nil {
			return nil, err
		}
		defer func() {
			if err := env.srv.DropDatabase(context.WithoutCancel(ctx), dbName); err != nil {
				t.Logf("drop %s: %v", dbName, err)
			}
		}()
		if _, err := migrate.Up(ctx, dbURL); err != nil {
			return nil, err
		}
		maxAttempts := max(100_000, 3000*seconds)
		if rate > 0 {
			maxAttempts = int(rate*run.Seconds()) + 1000
		}
		go func() {
			defer close(finished)
			res, err := loadgen.Run(ctx, &loadgen.Config{
				DatabaseURL: dbURL, Duration: run, Producers: c.producers, Workers: c.slots, Rate: rate, MaxAttempts: maxAttempts,
			})
			if err == nil {
				res.WriteTable(logf)
				tput = res.Throughput
				if !res.Drained {
					err = errors.New("attempts were left unfinished after the drain timeout")
				}
			}
			sideErr = err
		}()
	case "floor", "river":
		var cmd *exec.Cmd
		if side == "floor" {
			prefix = "floor"
			cmd = exec.CommandContext(ctx, c.floorBin, "-url", c.adminURL, "-kfsdb", c.kfsdbBin,
				"-producers", strconv.Itoa(c.producers), "-workers", strconv.Itoa(c.slots), "-seconds", secs, "-rate", rateArg)
		} else {
			prefix = "kfsriver"
			// -fetch-cooldown 1ms as scripts/bench-lifecycle.sh runs it.
			cmd = exec.CommandContext(ctx, c.riverBin, "-url", c.adminURL, "-fetch-cooldown", "1ms",
				"-producers", strconv.Itoa(c.producers), "-workers", strconv.Itoa(c.slots), "-seconds", secs, "-rate", rateArg)
		}
		if existing, err = churnDatabases(ctx, admin, prefix); err != nil {
			return nil, err
		}
		w := io.MultiWriter(logf, &lockedWriter{mu: &mu, w: &out})
		cmd.Stdout, cmd.Stderr = w, w
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		go func() {
			defer close(finished)
			if err := cmd.Wait(); err != nil {
				mu.Lock()
				sideErr = fmt.Errorf("%s: %w: %s", side, err, out.String())
				mu.Unlock()
			}
		}()
	}

	res := &churnSideResult{}
	var sampleErr error
	if sampling != nil {
		if dbName == "" {
			dbName, sampleErr = churnFindDatabase(ctx, admin, prefix, existing, finished)
		}
		if sampleErr == nil {
			s := newChurnSampler(c, side, variant, churnDatabaseURL(c.adminURL, dbName), sampling)
			res.minutes, sampleErr = s.run(ctx, finished)
		}
		if sampleErr != nil {
			cancel() // nothing more to record: stop the side
		}
	}
	<-finished
	if sampleErr != nil {
		return nil, fmt.Errorf("sampler: %w", sampleErr)
	}
	if sideErr != nil {
		return nil, sideErr
	}
	switch side {
	case "postgres":
		res.throughput = tput
	default:
		mu.Lock()
		res.throughput, err = churnThroughput(side, out.String())
		mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	return res, nil
}

// lockedWriter serializes the writes of a process's stdout and stderr.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

var (
	floorThroughput = regexp.MustCompile(`(?m)^floor rate=\S+ throughput=([0-9.]+)`)
	riverThroughput = regexp.MustCompile(`(?m)^\| throughput \(completed within the window\) \| ([0-9.]+) jobs/s`)
)

// churnThroughput reads the floor's or River's own throughput line.
func churnThroughput(side, out string) (float64, error) {
	re := floorThroughput
	if side == "river" {
		re = riverThroughput
	}
	m := re.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("%s: no throughput line in its output:\n%s", side, out)
	}
	return strconv.ParseFloat(m[1], 64)
}

// churnDatabases lists the server's databases named prefix_*.
func churnDatabases(ctx context.Context, admin *pgx.Conn, prefix string) (map[string]bool, error) {
	rows, err := admin.Query(ctx, `SELECT datname FROM pg_database WHERE starts_with(datname, $1 || '_')`, prefix)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, n := range names {
		set[n] = true
	}
	return set, nil
}

// churnFindDatabase waits for the database a side creates (prefix_*, not
// in existing).
func churnFindDatabase(ctx context.Context, admin *pgx.Conn, prefix string, existing map[string]bool, finished <-chan struct{}) (string, error) {
	for {
		now, err := churnDatabases(ctx, admin, prefix)
		if err != nil {
			return "", err
		}
		for n := range now {
			if !existing[n] {
				return n, nil
			}
		}
		select {
		case <-finished:
			return "", fmt.Errorf("the side ended before a database %s_* appeared", prefix)
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// churnDatabaseURL is adminURL with database name.
func churnDatabaseURL(adminURL, name string) string {
	u, err := url.Parse(adminURL)
	if err != nil {
		return adminURL
	}
	u.Path = "/" + name
	return u.String()
}
