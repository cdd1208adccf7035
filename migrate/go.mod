// Module migrate applies kfsdb's migrations (db/migrations) with goose's
// Provider. It is a module of its own so that an application can import the
// migration helper with goose and pgx only: no test harness, broker or
// metrics library comes with it (make check-deps checks its graph).
module github.com/knowledgefs/kfsdb/migrate

go 1.26.0

require (
	github.com/jackc/pgx/v5 v5.13.0
	github.com/knowledgefs/kfsdb v0.0.0
	github.com/pressly/goose/v3 v3.30.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/mfridman/interpolate v0.0.2 // indirect
	github.com/sethvargo/go-retry v0.5.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/text v0.44.0 // indirect
)

replace github.com/knowledgefs/kfsdb => ..
