package faultload

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// appWritesDDL is the app's own table: an in-transaction Start writes a
// row here first, so the check can see that the app's write and the
// attempt committed together or not at all.
const appWritesDDL = `CREATE TABLE faultload_app_writes (
	tenant_id         text NOT NULL,
	document_asset_id uuid NOT NULL,
	document_version  int  NOT NULL,
	written_at        timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (tenant_id, document_asset_id, document_version))`

// startRetryWait is the pause before a failed Start is tried again.
const startRetryWait = 100 * time.Millisecond

// seed creates the documents and starts the Upfront attempts.
func (r *Run) seed(ctx context.Context, t testing.TB) {
	t.Helper()
	c := r.cfg
	total := c.Upfront + c.Documents
	// Six spaces (tenants), rounded up to whole spaces, then exactly the
	// load's size.
	docs := testfactory.SeedDocuments(ctx, t, r.pool, 6, (total+5)/6)
	require.GreaterOrEqual(t, len(docs), total)
	for i, d := range docs[:total] {
		p := d.Scope.StartParams()
		p.MaxExecutionAttempts = c.MaxExecutionAttempts
		k := i - c.Upfront // the producers' k-th document
		r.docs = append(r.docs, &docState{doc: d, params: p, upfront: k < 0,
			inTx: k >= 0 && int(float64(k+1)*c.InTxFraction) > int(float64(k)*c.InTxFraction)})
	}
	if c.Upfront == 0 {
		return
	}
	upfront := testfactory.StartAll(ctx, t, c.Repo, r.pool, docs[:c.Upfront], c.MaxExecutionAttempts)
	for i, a := range upfront {
		r.docs[i].id = a.ID
	}
}

// produce runs the producers over the documents not started upfront; it
// closes r.produced when they have all returned.
func (r *Run) produce(ctx context.Context) {
	queue := make(chan *docState)
	var wg sync.WaitGroup
	for range r.cfg.Producers {
		wg.Go(func() {
			for d := range queue {
				r.startDoc(ctx, d)
				sleep(ctx, r.cfg.Interval)
			}
		})
	}
	go func() {
		defer close(r.produced)
		defer wg.Wait()
		defer close(queue)
		for _, d := range r.docs {
			if d.upfront {
				continue
			}
			select {
			case queue <- d:
			case <-ctx.Done():
				return
			}
		}
	}()
}

// startDoc starts d's attempt, retrying errors with the same identity
// until one try succeeds, StartRetryFor has passed or ctx ends.
func (r *Run) startDoc(ctx context.Context, d *docState) {
	r.mu.Lock()
	d.inFlight = true
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		d.inFlight = false
		r.mu.Unlock()
	}()
	deadline := time.Now().Add(r.cfg.StartRetryFor)
	for retry := false; ; retry = true {
		began := time.Now()
		id, called, err := r.tryStart(ctx, d, retry)
		now := time.Now()
		r.mu.Lock()
		switch {
		case err == nil:
			d.id = id
			if called {
				r.startOKs = append(r.startOKs, span{began, now})
			}
		case ctx.Err() != nil || now.After(deadline):
			d.gaveUp = true
		}
		if err != nil && called && !d.errored {
			d.errored, d.firstErr = true, err.Error()
		}
		gaveUp := d.gaveUp
		r.mu.Unlock()
		if err == nil || gaveUp {
			return
		}
		r.errs.add(ctx, err)
		sleep(ctx, startRetryWait)
	}
}

// tryStart makes one try. A retry first reads whether an earlier try
// committed after all: Start returns a live attempt of the version by
// itself (Created false), but one that already ended it does not see, and
// would start a second. called says whether Start itself ran (and gave
// err).
func (r *Run) tryStart(ctx context.Context, d *docState, retry bool) (id uuid.UUID, called bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	if retry {
		p := d.params
		as, err := r.cfg.Repo.ListDocumentVersionAttempts(cctx, r.pool, &repo.ListDocumentVersionAttemptsParams{
			TenantID: p.TenantID, KnowledgeSpaceID: p.KnowledgeSpaceID, DocumentAssetID: p.DocumentAssetID, DocumentVersion: p.DocumentVersion,
		})
		if err != nil {
			return uuid.Nil, false, err
		}
		if len(as) > 0 {
			return as[len(as)-1].ID, false, nil
		}
	}
	id, err = r.startOnce(cctx, d)
	return id, true, err
}

// startOnce runs Start, inside the app's own transaction for an inTx
// document.
func (r *Run) startOnce(ctx context.Context, d *docState) (uuid.UUID, error) {
	if !d.inTx {
		res, err := r.cfg.Repo.Start(ctx, r.pool, d.params)
		if err != nil {
			return uuid.Nil, err
		}
		return res.Attempt.ID, nil
	}
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return uuid.Nil, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = tx.Rollback(rctx) // after Commit, a no-op
	}()
	p := d.params
	if _, err := tx.Exec(ctx, `INSERT INTO faultload_app_writes (tenant_id, document_asset_id, document_version)
		VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, p.TenantID, p.DocumentAssetID, p.DocumentVersion); err != nil {
		return uuid.Nil, err
	}
	res, err := r.cfg.Repo.Start(ctx, tx, p)
	if err != nil {
		return uuid.Nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return uuid.Nil, err
	}
	return res.Attempt.ID, nil
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
