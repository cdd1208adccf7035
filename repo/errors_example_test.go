package repo_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/repo"
)

// Inputs are validated before any round trip: a malformed call is an
// *InputError naming the field, and nothing is sent (this pool has no
// server behind it). The examples that run against a real database (Start,
// Start in your transaction, the worker with pgsource, Cancel,
// RetryFailed) are in package github.com/knowledgefs/kfsdb/kfsdbtest,
// whose module brings the database they need.
func ExampleInputError() {
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none") // connects lazily
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	r := repo.New(nil)

	_, err = r.Start(context.Background(), pool, &repo.StartParams{TenantID: "acme", DocumentVersion: 1})
	var in *repo.InputError
	fmt.Println(errors.As(err, &in), errors.Is(err, repo.ErrInvalidInput))
	fmt.Println(in.Field)
	fmt.Println(err)
	// Output:
	// true true
	// KnowledgeSpaceID
	// kfsdb: invalid input: KnowledgeSpaceID must not be the zero UUID
}
