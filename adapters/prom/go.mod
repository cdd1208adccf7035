// Module prom exports kfsdb's runtime counts, statement latencies and
// backlog gauges to Prometheus. It is a separate module so that importers
// of kfsdb's repo, relay and worker never get client_golang in their
// module graph (make check-deps checks it). Its tests that need a database
// are in the tests module (tests/adapters/prom), which no released module
// requires.
module github.com/knowledgefs/kfsdb/adapters/prom

go 1.26.0

require (
	github.com/jackc/pgx/v5 v5.13.0
	github.com/knowledgefs/kfsdb v0.0.0
	github.com/prometheus/client_golang v1.25.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/pandatix/go-abnf v0.5.5 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.74.0 // indirect
	github.com/prometheus/procfs v0.23.0 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/text v0.44.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/knowledgefs/kfsdb => ../..
