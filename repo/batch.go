package repo

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/db/gen"
	"github.com/knowledgefs/kfsdb/kfstype"
)

// CompleteManyEntry is one lease to complete in CompleteMany.
type CompleteManyEntry struct {
	Lease *Lease
	// Through completes from any checkpoint (CompleteThrough); otherwise
	// the attempt must be at smoke_eval_passed (Complete).
	Through bool
	// CandidatePublicationID and CandidateFingerprint are
	// CompleteThroughParams'; only with Through.
	CandidatePublicationID *uuid.UUID
	CandidateFingerprint   *string
}

// CompleteManyResult is one entry's outcome, in input order.
type CompleteManyResult struct {
	Attempt *kfstype.Attempt
	// Err is what Complete or CompleteThrough would have returned for this
	// entry; the other entries are unaffected.
	Err error
}

// CompleteMany is Complete and CompleteThrough for a batch of leases in
// one statement: the worker's completer records what its slots finished
// meanwhile with one commit. Each entry keeps its transition's
// guard; one that fails it is retried alone (a second statement), whose
// typed error lands in its result's Err.
//
// Errors: *InputError for the batch (it names the entry); a database error
// fails the whole batch.
func (r *Repo) CompleteMany(ctx context.Context, db DBTX, entries []CompleteManyEntry) ([]CompleteManyResult, error) {
	if err := r.call(ctx, db).result(); err != nil {
		return nil, err
	}
	n := len(entries)
	if n == 0 || n > MaxBatchSize {
		return nil, &InputError{Field: "Entries", Reason: fmt.Sprintf("must hold 1..%d entries", MaxBatchSize)}
	}
	arg := &gen.CompleteManyParams{
		Now: r.now(), AttemptIds: make([]uuid.UUID, n), LeaseTokens: make([]uuid.UUID, n), WorkerIds: make([]string, n),
		Through: make([]bool, n), CandidatePublicationIds: make([]uuid.UUID, n), CandidateFingerprints: make([]string, n),
	}
	index := make(map[uuid.UUID]int, n)
	for i := range entries {
		e := &entries[i]
		err := entryError("Entries", i, func(v *validator) {
			e.Lease.validate(v)
			validateCandidate(v, e.CandidatePublicationID, e.CandidateFingerprint)
			if !e.Through && e.CandidatePublicationID != nil {
				v.fail("CandidatePublicationID", "is only for Through")
			}
		})
		if err != nil {
			return nil, err
		}
		if _, dup := index[e.Lease.AttemptID]; dup {
			return nil, &InputError{Field: fmt.Sprintf("Entries[%d]", i), Reason: "names an attempt twice in the batch"}
		}
		index[e.Lease.AttemptID] = i
		arg.AttemptIds[i], arg.LeaseTokens[i], arg.WorkerIds[i], arg.Through[i] = e.Lease.AttemptID, e.Lease.Token, e.Lease.WorkerID, e.Through
		if e.CandidatePublicationID != nil {
			arg.CandidatePublicationIds[i], arg.CandidateFingerprints[i] = *e.CandidatePublicationID, *e.CandidateFingerprint
		}
	}
	rows, err := r.q.CompleteMany(ctx, db, arg)
	if err != nil {
		return nil, fmt.Errorf("complete %d attempts: %w", n, mapError(err))
	}
	out := make([]CompleteManyResult, n)
	for _, row := range rows {
		a := attemptFromRow(row)
		out[index[a.ID]] = CompleteManyResult{Attempt: a}
	}
	for i := range entries {
		if out[i].Attempt != nil {
			continue // completed by the statement
		}
		e := &entries[i]
		var a *kfstype.Attempt
		if e.Through {
			a, err = r.CompleteThrough(ctx, db, &CompleteThroughParams{
				Lease: e.Lease, CandidatePublicationID: e.CandidatePublicationID, CandidateFingerprint: e.CandidateFingerprint,
			})
		} else {
			a, err = r.Complete(ctx, db, e.Lease)
		}
		out[i] = CompleteManyResult{Attempt: a, Err: err}
	}
	return out, nil
}

// entryError runs check on a batch entry and names the entry in its
// *InputError.
func entryError(field string, i int, check func(*validator)) error {
	var v validator
	check(&v)
	if v.err == nil {
		return nil
	}
	return &InputError{Field: fmt.Sprintf("%s[%d].%s", field, i, v.err.Field), Reason: v.err.Reason}
}
