package repo_test

import "github.com/knowledgefs/kfsdb/repo"

type repoAcquire struct {
	repo.Delivery
	WorkerID string
}

func (a repoAcquire) p() *repo.AcquireLeaseParams {
	return &repo.AcquireLeaseParams{Delivery: a.Delivery, WorkerID: a.WorkerID}
}
