package multiproc_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// tracker knows every attempt the test started and its document.
type tracker struct {
	mu    sync.Mutex
	ids   []uuid.UUID
	scope map[uuid.UUID]testfactory.Scope
}

func (tr *tracker) add(id uuid.UUID, s testfactory.Scope) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if _, ok := tr.scope[id]; !ok {
		tr.ids = append(tr.ids, id)
		tr.scope[id] = s
	}
}

func (tr *tracker) random() (uuid.UUID, testfactory.Scope) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	id := tr.ids[rand.IntN(len(tr.ids))]
	return id, tr.scope[id]
}

// opStats counts the racers' calls and their answers.
type opStats struct {
	mu         sync.Mutex
	answers    map[string]int
	unexpected []string
	deadlocks  int
}

func (s *opStats) record(op string, err error, expected ...error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
		s.deadlocks++
	}
	answer := "ok"
	if err != nil {
		answer = "unexpected"
		for _, e := range expected {
			if errors.Is(err, e) {
				answer = strings.TrimPrefix(e.Error(), "kfsdb: ")
			}
		}
		if answer == "unexpected" {
			s.unexpected = append(s.unexpected, fmt.Sprintf("%s: %v", op, err))
		}
	}
	s.answers[op+": "+answer]++
}
