// Package repo_test proves every transition of package repo against a real
// PostgreSQL: one server per package, one database per test.
package repo_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testBundle is what most tests need: a database, a repo on a manual clock
// and a driver to put attempts in any state.
type testBundle struct {
	ctx   context.Context
	db    *pgtest.DB
	clock *testfactory.Clock
	repo  *repo.Repo
	drv   *testfactory.Driver
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	t.Parallel()
	db := pgtest.NewDB(t)
	clock := testfactory.NewClock()
	r := repo.New(&repo.Config{Clock: clock})
	return &testBundle{
		ctx:   context.Background(),
		db:    db,
		clock: clock,
		repo:  r,
		drv:   &testfactory.Driver{Repo: r, DB: db.Pool, Invariants: true},
	}
}

func (b *testBundle) scope(t *testing.T) *testfactory.Scope {
	t.Helper()
	return testfactory.NewScope(b.ctx, t, b.db.Pool, nil)
}

// rows reads an attempt and its outbox row and checks every invariant.
func (b *testBundle) rows(t *testing.T, attemptID uuid.UUID) *testfactory.Rows {
	t.Helper()
	return testfactory.RequireInvariants(b.ctx, t, b.db.Pool, attemptID)
}
