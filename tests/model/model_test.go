package model_test

import (
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// This file and model_{control,relay,worker}_test.go are the reference
// model: the spec's state machine in plain Go, with no database and
// nothing from package repo but its parameter types.
// Each method takes a call's parameters, predicts its error class and, when
// the call applies, moves the expected rows exactly as the spec (and the
// guards of db/queries) say. Values only the database picks (ids, lock and
// lease tokens) are learned from the call's result by the caller.

// pub is a projection set publication of the sequence.
type pub struct {
	scope  int
	fp     string
	status string
}

// attemptModel is one attempt and its outbox row as the model expects them
// to be stored, plus what the sequence's relay and workers remember about
// it (every lock token, job id and lease ever handed out).
type attemptModel struct {
	scope  int
	a      kfstype.Attempt
	o      kfstype.OutboxMessage
	tokens []uuid.UUID  // lock tokens of every claim, oldest first
	jobs   []string     // queue job ids of every MarkDispatched, oldest first
	leases []repo.Lease // every lease, oldest first; the last is current
}

// scopeRef is what the model needs to know of a testfactory.Scope.
type scopeRef struct {
	tenant  string
	space   uuid.UUID
	asset   uuid.UUID
	version int32
}

type model struct {
	now      time.Time
	scopes   [2]scopeRef
	heads    [2]int32
	pubs     map[uuid.UUID]pub
	attempts []*attemptModel
}

func tp(t time.Time) *time.Time { return &t }
func sp(s string) *string       { return &s }

// cut is the spec's message truncation (4,096 characters).
func cut(s string) string {
	if utf8.RuneCountInString(s) <= repo.MaxErrorMessageRunes {
		return s
	}
	return string([]rune(s)[:repo.MaxErrorMessageRunes])
}

func (m *model) find(id uuid.UUID) *attemptModel {
	for _, am := range m.attempts {
		if am.a.ID == id {
			return am
		}
	}
	return nil
}

func (m *model) findOutbox(id uuid.UUID) *attemptModel {
	for _, am := range m.attempts {
		if am.o.ID == id {
			return am
		}
	}
	return nil
}

// live is the document version's live attempt, if any.
func (m *model) live(scope int) *attemptModel {
	for _, am := range m.attempts {
		if am.scope == scope && am.a.Active {
			return am
		}
	}
	return nil
}

func (m *model) scopeOf(tenant string, space, asset uuid.UUID, version int32) int {
	for i, s := range m.scopes {
		if s.tenant == tenant && s.space == space && s.asset == asset && s.version == version {
			return i
		}
	}
	return -1
}

// touch is "every write bumps row_version".
func (m *model) touch(am *attemptModel) {
	am.a.RowVersion++
	am.a.UpdatedAt = m.now
}

func (m *model) clearLease(am *attemptModel) {
	am.a.WorkerID, am.a.LeaseToken, am.a.LeaseExpiresAt, am.a.HeartbeatAt = nil, nil, nil, nil
}

func (m *model) clearLock(am *attemptModel) {
	am.o.LockedBy, am.o.LockToken, am.o.LockedUntil = nil, nil, nil
	am.o.UpdatedAt = m.now
}

// end is the common part of every terminal transition.
func (m *model) end(am *attemptModel, state kfstype.RunState, status kfstype.OutboxStatus) {
	am.a.RunState = state
	am.a.Active = false
	am.a.CompletedAt = tp(m.now)
	m.clearLease(am)
	am.a.RetryAt = nil
	m.touch(am)
	am.o.Status = status
	m.clearLock(am)
}
