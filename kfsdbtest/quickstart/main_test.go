package main

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/kfsdbtest"
	"github.com/knowledgefs/kfsdb/kfstype"
)

func TestMain(m *testing.M) { kfsdbtest.Main(m) }

// TestQuickStart runs the README's quick start on an empty database: it
// migrates it, starts one attempt and its worker completes it.
func TestQuickStart(t *testing.T) {
	db := kfsdbtest.NewEmptyDB(t)
	if err := run(context.Background(), db.URL); err != nil {
		t.Fatal(err)
	}
	var id uuid.UUID
	if err := db.Pool.QueryRow(context.Background(), `SELECT id FROM document_compilation_attempts`).Scan(&id); err != nil {
		t.Fatal(err) // also when there is not exactly one attempt
	}
	db.RequireAttempt(t, id, kfsdbtest.AttemptWant{RunState: kfstype.RunStateSucceeded, Checkpoint: kfstype.CheckpointPublished})
	db.RequireOutbox(t, id, kfsdbtest.OutboxWant{Status: kfstype.OutboxStatusCompleted})
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
