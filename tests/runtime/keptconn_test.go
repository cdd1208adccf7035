package runtime_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/internal/keptconn"
)

// planCacheModes is plan_cache_mode on every connection of pool, read on
// all of them at once (each acquired until all are).
func planCacheModes(ctx context.Context, t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	var held []*pgxpool.Conn
	defer func() {
		for _, c := range held {
			c.Release()
		}
	}()
	var modes []string
	for range pool.Stat().TotalConns() {
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		held = append(held, c)
		var mode string
		require.NoError(t, c.QueryRow(ctx, "SHOW plan_cache_mode").Scan(&mode))
		modes = append(modes, mode)
	}
	return modes
}

// TestKeptConnGenericPlans: a Set with genericPlans plans a prepared
// statement generically from its first run on the connections it has, and
// every connection goes back to the pool with the session's own setting,
// whichever way it goes back. Its counts do not depend on scheduling: one
// goroutine, and pgxpool releases a connection synchronously (no
// AfterRelease hook; none is closed here, so none is destroyed in the
// background).
func TestKeptConnGenericPlans(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 8)
	ctx, pool := e.ctx, e.pool

	set := keptconn.New(pool, 1, true)
	c, err := set.Acquire(ctx)
	require.NoError(t, err)
	var mode string
	require.NoError(t, c.QueryRow(ctx, "SHOW plan_cache_mode").Scan(&mode))
	require.Equal(t, "force_generic_plan", mode)
	// The first run of a prepared statement with a parameter: generic.
	_, err = c.Exec(ctx, "PREPARE kept_probe AS SELECT count(*) FROM document_compilation_attempts WHERE tenant_id = $1")
	require.NoError(t, err)
	_, err = c.Exec(ctx, "EXECUTE kept_probe('t')")
	require.NoError(t, err)
	var generic, custom int
	require.NoError(t, c.QueryRow(ctx, "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = 'kept_probe'").Scan(&generic, &custom))
	require.Equal(t, []int{1, 0}, []int{generic, custom}, "generic and custom plans of the first run")
	_, err = c.Exec(ctx, "DEALLOCATE kept_probe")
	require.NoError(t, err)

	// Kept: the next Acquire gets the same session.
	pid := c.Conn.Conn().PgConn().PID()
	set.Put(c, nil)
	c, err = set.Acquire(ctx)
	require.NoError(t, err)
	require.Equal(t, pid, c.Conn.Conn().PgConn().PID())
	// A failed use gives the connection back, reset.
	set.Put(c, errors.New("the fetch failed"))
	require.EqualValues(t, 0, pool.Stat().AcquiredConns())
	for _, m := range planCacheModes(ctx, t, pool) {
		require.Equal(t, "auto", m, "a connection went back with the Set's setting")
	}

	// Two in use, one kept (keep 1): the other goes back reset; Close
	// gives the kept one back reset.
	c, err = set.Acquire(ctx)
	require.NoError(t, err)
	c2, err := set.Acquire(ctx)
	require.NoError(t, err)
	require.NotEqual(t, c.Conn.Conn().PgConn().PID(), c2.Conn.Conn().PgConn().PID())
	set.Put(c, nil)
	set.Put(c2, nil)
	require.EqualValues(t, 1, pool.Stat().AcquiredConns())
	set.Close()
	require.EqualValues(t, 0, pool.Stat().AcquiredConns())
	for _, m := range planCacheModes(ctx, t, pool) {
		require.Equal(t, "auto", m, "a connection went back with the Set's setting")
	}

	// Without genericPlans the session is left alone.
	plain := keptconn.New(pool, 1, false)
	c, err = plain.Acquire(ctx)
	require.NoError(t, err)
	require.NoError(t, c.QueryRow(ctx, "SHOW plan_cache_mode").Scan(&mode))
	require.Equal(t, "auto", mode)
	plain.Put(c, nil)
	plain.Close()
}
