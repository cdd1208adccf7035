package pgsource_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/worker"
)

// Dedicated capacity for a large tenant beside a fleet for the rest: one
// source serves only "acme" (Config.Tenants), the other every tenant but
// it (Config.ExcludeTenants); neither leases the other's attempts, and
// caps set with repo.SetTenantLimit hold across both. Usually each runs
// in processes of its own. It needs a database, so it is compiled, not
// run; kfsdbtest's Example_workerPgsourceTenantLists runs it.
func ExampleConfig_tenantLists() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://kfsdb@localhost/kfsdb")
	if err != nil {
		log.Fatal(err)
	}
	h := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		// … compile job.Attempt …
		return nil
	})
	for _, cfg := range []*pgsource.Config{
		{Tenants: []string{"acme"}},
		{ExcludeTenants: []string{"acme"}},
	} {
		src, err := pgsource.New(pool, cfg)
		if err != nil {
			log.Fatal(err) // a *repo.InputError naming the field: an empty Tenants, both lists, a repeated tenant
		}
		w, err := worker.New(pool, src, h, &worker.Config{Concurrency: 8})
		if err != nil {
			log.Fatal(err)
		}
		go func() { _ = w.Run(ctx) }()
	}
}
