// Command benchsummary reads `go test -bench` output of package bench and
// prints a Markdown table of the median throughput per operation and
// implementation, the repo/raw ratio and the ratio to pgbench's
// single-row UPDATE and (if measured) to pgbench running the seed
// schema's heartbeat shape, all from the same run.
//
//	go run ./bench/benchsummary bench/out/bench.txt
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// lineRe matches a result line: name, iterations, then value/unit pairs.
var lineRe = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: benchsummary FILE")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer f.Close()
	if err := summarize(f, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

type key struct{ group, op, impl string }

func summarize(r io.Reader, w io.Writer) error {
	vals := map[key][]float64{}
	units := map[key]string{}
	var order []key
	var config []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "pg-") || strings.HasPrefix(line, "clients:") {
			config = append(config, line)
		}
		m := lineRe.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		k := parseName(m[1])
		fields := strings.Fields(m[2])
		for i := 0; i+1 < len(fields); i += 2 {
			if u := fields[i+1]; u == "tx/s" || u == "rows/s" {
				v, err := strconv.ParseFloat(fields[i], 64)
				if err != nil {
					return err
				}
				if _, ok := vals[k]; !ok {
					order = append(order, k)
				}
				vals[k] = append(vals[k], v)
				units[k] = u
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	// The references: pgbench's narrow UPDATE, and (if measured) pgbench
	// running the seed schema's heartbeat shape.
	pgbench := median(vals[key{"Pgbench", "NarrowUpdate", "pgbench"}])
	seedShape := median(vals[key{"Pgbench", "SeedHeartbeat", "pgbench"}])
	for _, c := range dedupe(config) {
		fmt.Fprintf(w, "%s  \n", c)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| operation | unit | repo (median) | raw (median) | repo/raw | repo/pgbench | repo/seed shape | runs |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|")
	seen := map[[2]string]bool{}
	for _, k := range order {
		id := [2]string{k.group, k.op}
		if seen[id] {
			continue
		}
		seen[id] = true
		rk, wk := key{k.group, k.op, "repo"}, key{k.group, k.op, "raw"}
		if k.impl == "pgbench" {
			v := median(vals[k])
			vsPg, vsSeed := "", ""
			if pgbench > 0 {
				vsPg = fmt.Sprintf("%.2f", v/pgbench)
			}
			if seedShape > 0 {
				vsSeed = fmt.Sprintf("%.2f", v/seedShape)
			}
			fmt.Fprintf(w, "| %s/%s (pgbench) | %s | %.0f | | | %s | %s | %d |\n", k.group, k.op, units[k], v, vsPg, vsSeed, len(vals[k]))
			continue
		}
		repoV, rawV := median(vals[rk]), median(vals[wk])
		ratio, vsPg, vsSeed := "", "", ""
		if repoV > 0 && rawV > 0 {
			ratio = fmt.Sprintf("%.2f", repoV/rawV)
		}
		if pgbench > 0 && units[rk] == "tx/s" {
			vsPg = fmt.Sprintf("%.2f", repoV/pgbench)
		}
		if seedShape > 0 && units[rk] == "tx/s" {
			vsSeed = fmt.Sprintf("%.2f", repoV/seedShape)
		}
		fmt.Fprintf(w, "| %s/%s | %s | %.0f | %.0f | %s | %s | %s | %d |\n", k.group, k.op, units[rk], repoV, rawV, ratio, vsPg, vsSeed, len(vals[rk]))
	}
	return nil
}

// parseName splits Transition/op=Start/impl=repo.
func parseName(name string) key {
	parts := strings.Split(name, "/")
	k := key{group: parts[0]}
	for _, p := range parts[1:] {
		switch {
		case strings.HasPrefix(p, "op="):
			k.op = strings.TrimPrefix(p, "op=")
		case strings.HasPrefix(p, "impl="):
			k.impl = strings.TrimPrefix(p, "impl=")
		}
	}
	return k
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
