package main

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/knowledgefs/kfsdb/kfsdbtest"
	"github.com/knowledgefs/kfsdb/kfstype"
)

// TestQuickStart runs the README's quick start twice on one database,
// empty at first: the first run migrates it, and each run starts one
// attempt (on platform rows of its own) that its worker completes.
func TestQuickStart(t *testing.T) {
	db := kfsdbtest.NewEmptyDB(t)
	for i := 1; i <= 2; i++ {
		if err := run(context.Background(), db.URL); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	rows, err := db.Pool.Query(context.Background(), `SELECT id FROM document_compilation_attempts`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2 {
		t.Fatalf("%d attempts after two runs, want 2", len(ids))
	}
	for _, id := range ids {
		db.RequireAttempt(t, id, kfsdbtest.AttemptWant{RunState: kfstype.RunStateSucceeded, Checkpoint: kfstype.CheckpointPublished})
		db.RequireOutbox(t, id, kfsdbtest.OutboxWant{Status: kfstype.OutboxStatusCompleted})
	}
}

// TestReadmeShowsThisProgram: the README's quick start is this file, byte
// for byte, so it cannot drift from the program make test runs.
func TestReadmeShowsThisProgram(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	program, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	const marker = "<!-- quick start: kfsdbtest/quickstart/main.go, checked by its TestReadmeShowsThisProgram -->\n```go\n"
	i := bytes.Index(readme, []byte(marker))
	if i < 0 {
		t.Fatalf("README.md has no quick start block opened by %q", marker)
	}
	block := readme[i+len(marker):]
	end := bytes.Index(block, []byte("\n```\n"))
	if end < 0 {
		t.Fatal("README.md's quick start block is not closed")
	}
	if got := string(block[:end+1]); got != string(program) {
		t.Errorf("README.md's quick start differs from kfsdbtest/quickstart/main.go; copy the file into the block.\nREADME:\n%s", got)
	}
}
