package pgsource

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestFetchConns: what a source keeps, and when its kept sessions plan
// generically. The pools never connect (no MinConns, no Acquire).
func TestFetchConns(t *testing.T) {
	for _, c := range []struct {
		name        string
		maxConns    int32
		mode        pgx.QueryExecMode
		pollOnly    bool
		keep        int
		genericPlan bool
	}{
		{"a pool of 16", 16, pgx.QueryExecModeCacheStatement, false, 2, true},
		{"a pool of 8", 8, pgx.QueryExecModeCacheStatement, false, 1, true},
		{"a small pool keeps none", 4, pgx.QueryExecModeCacheStatement, false, 0, false},
		{"poll only (PgBouncer): kept, sessions left alone", 16, pgx.QueryExecModeCacheStatement, true, 2, false},
		{"simple protocol: nothing prepared", 16, pgx.QueryExecModeSimpleProtocol, false, 2, false},
		{"exec mode: nothing prepared", 16, pgx.QueryExecModeExec, false, 2, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := pgxpool.ParseConfig("postgres://kfsdb@127.0.0.1:1/kfsdb")
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxConns = c.maxConns
			cfg.ConnConfig.DefaultQueryExecMode = c.mode
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			src, err := New(pool, &Config{PollOnly: c.pollOnly})
			if err != nil {
				t.Fatal(err)
			}
			set := src.fetchConns()
			if set.Keep() != c.keep || set.GenericPlans() != c.genericPlan {
				t.Errorf("keep %d, generic plans %v; want %d, %v", set.Keep(), set.GenericPlans(), c.keep, c.genericPlan)
			}
		})
	}
}
