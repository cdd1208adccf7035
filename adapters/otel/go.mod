// Module otel traces kfsdb with OpenTelemetry: a span per SQL statement
// named after its sqlc query, a producer span per publication and a
// consumer span per delivery, joined to the Start's trace. It is a
// separate module so that importers of kfsdb's repo, relay and worker never
// get the OpenTelemetry SDK in their module graph (make check-deps checks
// it). Its tests, which need a database, are in the tests module
// (tests/adapters/otel), which no released module requires.
module github.com/knowledgefs/kfsdb/adapters/otel

go 1.26.0

require (
	github.com/jackc/pgx/v5 v5.13.0
	github.com/knowledgefs/kfsdb v0.0.0
	go.opentelemetry.io/otel v1.47.0
	go.opentelemetry.io/otel/trace v1.47.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/text v0.44.0 // indirect
)

replace github.com/knowledgefs/kfsdb => ../..
