package runtime_test

import "github.com/google/uuid"

func mustUUID(s string) uuid.UUID { return uuid.MustParse(s) }
