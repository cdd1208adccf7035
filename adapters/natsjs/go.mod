// Module natsjs is NATS JetStream as kfsdb's broker (relay.Publisher and
// worker.Source). It is a separate module so that importers of kfsdb's
// repo, relay and worker never get nats.go in their module graph (make
// check-deps checks it). Its tests that need a database or a NATS server
// are in the tests module (tests/adapters/natsjs), which no released module
// requires.
module github.com/knowledgefs/kfsdb/adapters/natsjs

go 1.26.0

require (
	github.com/google/uuid v1.6.0
	github.com/knowledgefs/kfsdb v0.0.0
	github.com/nats-io/nats.go v1.56.0
)

require (
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/pgx/v5 v5.13.0 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/nats-io/nkeys v0.4.17 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/text v0.44.0 // indirect
)

replace github.com/knowledgefs/kfsdb => ../..
