// Package adapters imports every kfsdb adapter, as an application using
// them does; the rehearsal builds it and runs go mod tidy beside it.
package adapters

import (
	_ "github.com/knowledgefs/kfsdb/adapters/natsjs"
	_ "github.com/knowledgefs/kfsdb/adapters/otel"
	_ "github.com/knowledgefs/kfsdb/adapters/prom"
)
