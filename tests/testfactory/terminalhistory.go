package testfactory

import (
	"cmp"
	"context"
	"fmt"
	"strings"
)

// TerminalHistoryOptions tune InsertTerminalHistory. The zero value (or
// nil) is the issue 40 shape: 10^4 tenants, a year of history, 250,000
// attempts per statement.
type TerminalHistoryOptions struct {
	// Tenants is how many tenants share the history ("ageing-00000" ..),
	// Zipf-distributed: tenant r gets about 1/(r+1) of the rows (the
	// largest about a tenth of them at 10^4 tenants), and min(64/(r+1), 1)
	// knowledge spaces. Defaults to 10,000.
	Tenants int
	// Days is how far back completed_at reaches; the density grows
	// linearly towards now, three times as dense today as Days ago (a
	// platform that tripled its load over the period). Defaults to 365.
	Days int
	// Chunk is the attempts inserted per statement. Defaults to 250,000.
	Chunk int
	// Progress, when set, is called after every chunk with the attempts
	// inserted so far by this call.
	Progress func(done int)
}

// Terminal states of the generated history, by share: run state, outbox
// status, checkpoint, executions, error code.
//
//	succeeded  85%  completed  published   1 (one in ten: 2)  -
//	failed      7%  dead       parsed      5 (exhausted)      HANDLER_FAILED
//	canceled    5%  canceled   queued      0                  CANCELED
//	superseded  3%  canceled   queued      0                  SUPERSEDED
const terminalHistoryAttemptsPerAsset = 5

// InsertTerminalHistory adds n terminal attempts with their outbox rows,
// as retention would keep them after a year of service: Tenants tenants
// (Zipf-skewed: a few large, a long tail), completed over the last Days
// days (more recent rows denser: three times as dense today as a year ago), five attempts per document asset
// version, mostly succeeded (bound to their space's candidate publication
// of that month), some failed (outbox dead), canceled or superseded (outbox
// canceled). Ids are UUIDv7 stamped with created_at, as Start makes them.
// Every constraint and foreign key of the seed schema holds and is checked
// (the tables and their indexes are left as they are). The tenants, their
// spaces and their twelve monthly publications per space are created on
// the first call; calls accumulate. Then ANALYZE. Set-based: one INSERT
// per table per chunk of generate_series rows.
func InsertTerminalHistory(ctx context.Context, db DBTX, n int, opts *TerminalHistoryOptions) error {
	var o TerminalHistoryOptions
	if opts != nil {
		o = *opts
	}
	o.Tenants, o.Days, o.Chunk = cmp.Or(o.Tenants, 10_000), cmp.Or(o.Days, 365), cmp.Or(o.Chunk, 250_000)
	switch {
	case n < 0 || o.Tenants < 0 || o.Days < 0 || o.Chunk < 0:
		return fmt.Errorf("InsertTerminalHistory: n=%d and options %+v must not be negative", n, o)
	case n == 0:
		return nil
	}
	if _, err := db.Exec(ctx, terminalHistoryScopeSQL, o.Tenants); err != nil {
		return fmt.Errorf("insert the history's tenants, spaces and publications: %w", err)
	}
	for done := 0; done < n; {
		c := min(o.Chunk, n-done)
		assets := (c + terminalHistoryAttemptsPerAsset - 1) / terminalHistoryAttemptsPerAsset
		if _, err := db.Exec(ctx, terminalHistoryChunkSQL, assets, c, o.Tenants, o.Days); err != nil {
			return fmt.Errorf("insert historical attempts %d..%d of %d: %w", done, done+c, n, err)
		}
		done += c
		if o.Progress != nil {
			o.Progress(done)
		}
	}
	if _, err := db.Exec(ctx, `ANALYZE knowledge_spaces, document_assets, projection_set_publications,
		document_compilation_attempts, document_compilation_outbox`); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	return nil
}

// TerminalHistoryTenant is the name of the history's tenant of rank r
// (0 is the largest).
func TerminalHistoryTenant(r int) string { return fmt.Sprintf("ageing-%05d", r) }

// uuidV7SQL is a UUIDv7 whose timestamp is the SQL expression ts (a
// timestamptz): its 48 bits of Unix milliseconds over gen_random_uuid()'s
// bytes, version nibble 7 (the variant bits are gen_random_uuid's).
func uuidV7SQL(ts string) string {
	return strings.NewReplacer("TS", ts).Replace(`encode(set_byte(overlay(uuid_send(gen_random_uuid())
	  PLACING substring(int8send(floor(extract(epoch FROM TS) * 1000)::bigint) FROM 3) FROM 1 FOR 6),
	  6, 112 + floor(random() * 16)::int), 'hex')::uuid`)
}

// The ids of the history's spaces and publications are md5s of their
// tenant rank, space number and month, so a chunk finds them without a
// lookup and calls add nothing twice.
const (
	terminalHistorySpaceID = `md5('kfsdb-ageing-space:' || TENANT || ':' || SPACE)::uuid`
	terminalHistoryPubID   = `md5('kfsdb-ageing-publication:' || SPACEID || ':' || MONTH)::uuid`
	terminalHistoryPubFP   = `'projection-set-sha256:' || encode(sha256(convert_to(PUBID::text, 'UTF8')), 'hex')`
	// terminalHistorySpaces is tenant rank r's space count.
	terminalHistorySpaces = `greatest(1, 64 / (TENANT + 1))`
)

func terminalHistoryExpr(tmpl string, kv ...string) string {
	return strings.NewReplacer(kv...).Replace(tmpl)
}

// terminalHistoryScopeSQL inserts $1 tenants' spaces and each space's
// publications for months 0 (this one: published) to 11 (superseded).
var terminalHistoryScopeSQL = `
WITH spaces AS (
  SELECT t, ` + terminalHistoryExpr(terminalHistorySpaceID, "TENANT", "t", "SPACE", "s") + ` AS id
    FROM generate_series(0, $1::int - 1) t
   CROSS JOIN LATERAL generate_series(0, ` + terminalHistoryExpr(terminalHistorySpaces, "TENANT", "t") + ` - 1) s
), ks AS (
  INSERT INTO knowledge_spaces (id, tenant_id, slug, name, created_at, updated_at)
  SELECT id, 'ageing-' || lpad(t::text, 5, '0'), 'space-' || id, 'Ageing space', now() - interval '400 days', now() - interval '400 days'
    FROM spaces
  ON CONFLICT DO NOTHING
)
INSERT INTO projection_set_publications (id, tenant_id, knowledge_space_id, fingerprint, projection_version, status,
  created_at, updated_at)
SELECT p.id, 'ageing-' || lpad(s.t::text, 5, '0'), s.id, ` + terminalHistoryExpr(terminalHistoryPubFP, "PUBID", "p.id") + `, 1,
       CASE WHEN m = 0 THEN 'published' ELSE 'superseded' END,
       now() - m * interval '30 days', now() - m * interval '30 days'
  FROM spaces s
 CROSS JOIN generate_series(0, 11) m
 CROSS JOIN LATERAL (SELECT ` + terminalHistoryExpr(terminalHistoryPubID, "SPACEID", "s.id", "MONTH", "m") + ` AS id) p
ON CONFLICT DO NOTHING`

// terminalHistoryChunkSQL inserts $1 asset versions and $2 (at most five
// per asset) terminal attempts with their outbox rows, over $3 tenants and
// $4 days. base and attempts are MATERIALIZED so each random() and
// gen_random_uuid() is drawn once per row. Rows go in in created_at order,
// which is their UUIDv7 ids' and idempotency keys' order: most index
// insertions then land next to the previous one.
var terminalHistoryChunkSQL = `
WITH base AS MATERIALIZED (
  SELECT r.d, r.t, x.s, y.sp, y.ended, gen_random_uuid() AS asset_id, 1 + floor(random() * 3)::int AS version
    FROM (SELECT d, least($3::int - 1, floor(exp(random() * ln($3::int + 1.0)))::int - 1) AS t,
                 random() AS us, random() AS ua
            FROM generate_series(0, $1::int - 1) d) r
   CROSS JOIN LATERAL (SELECT floor(r.us * ` + terminalHistoryExpr(terminalHistorySpaces, "TENANT", "r.t") + `)::int AS s) x
   CROSS JOIN LATERAL (SELECT ` + terminalHistoryExpr(terminalHistorySpaceID, "TENANT", "r.t", "SPACE", "x.s") + ` AS sp,
                              now() - interval '1 day' * $4::int * (3 - sqrt(9 - 8 * r.ua)) / 2 AS ended) y
), assets AS (
  INSERT INTO document_assets (id, knowledge_space_id, filename, mime_type, object_key, sha256, size_bytes, version,
    parser_status, created_at, updated_at)
  SELECT b.asset_id, b.sp, 'document-' || b.d || '.pdf', 'application/pdf', 'objects/' || b.asset_id,
         encode(sha256(uuid_send(b.asset_id)), 'hex'), 4096 + b.d % 1000000, b.version, 'parsed',
         b.ended - interval '5 hours', b.ended - interval '5 hours'
    FROM base b
), rows AS MATERIALIZED (
  SELECT b.t, b.sp, b.asset_id, b.version, st.run_state, st.executions, c.completed_at,
         c.completed_at - (1 + random() * 600) * interval '1 second' AS created_at,
         least(11, floor(extract(epoch FROM now() - c.completed_at) / (30 * 86400)))::int AS month
    FROM base b
   CROSS JOIN generate_series(0, ` + fmt.Sprint(terminalHistoryAttemptsPerAsset-1) + `) k
   CROSS JOIN LATERAL (SELECT b.ended - k * interval '47 minutes' AS completed_at, random() AS u) c
   CROSS JOIN LATERAL (SELECT CASE WHEN c.u < 0.85 THEN 'succeeded' WHEN c.u < 0.92 THEN 'failed'
                                   WHEN c.u < 0.97 THEN 'canceled' ELSE 'superseded' END AS run_state,
                              CASE WHEN c.u < 0.085 THEN 2 WHEN c.u < 0.85 THEN 1 WHEN c.u < 0.92 THEN 5 ELSE 0 END AS executions) st
   WHERE b.d * ` + fmt.Sprint(terminalHistoryAttemptsPerAsset) + ` + k < $2::int
), attempts AS MATERIALIZED (
  SELECT r.*, ` + uuidV7SQL("r.created_at") + ` AS id, ` + uuidV7SQL("r.created_at") + ` AS outbox_id,
         CASE WHEN r.executions > 0 THEN r.created_at + interval '40 milliseconds' END AS started_at,
         CASE WHEN r.run_state = 'succeeded' THEN p.id END AS pub_id
    FROM rows r
   CROSS JOIN LATERAL (SELECT ` + terminalHistoryExpr(terminalHistoryPubID, "SPACEID", "r.sp", "MONTH", "r.month") + ` AS id) p
), inserted AS (
  INSERT INTO document_compilation_attempts (id, tenant_id, knowledge_space_id, document_asset_id, document_version,
    publication_generation_id, base_head_revision, candidate_publication_id, candidate_fingerprint, checkpoint, run_state,
    active_slot, execution_attempts, max_execution_attempts, queue_job_id, last_error_code, last_error_message,
    row_version, created_at, updated_at, started_at, completed_at)
  SELECT a.id, 'ageing-' || lpad(a.t::text, 5, '0'), a.sp, a.asset_id, a.version,
         gen_random_uuid(), a.version - 1, a.pub_id,
         CASE WHEN a.pub_id IS NOT NULL THEN ` + terminalHistoryExpr(terminalHistoryPubFP, "PUBID", "a.pub_id") + ` END,
         CASE a.run_state WHEN 'succeeded' THEN 'published' WHEN 'failed' THEN 'parsed' ELSE 'queued' END, a.run_state,
         NULL, a.executions, 5, CASE WHEN a.executions > 0 THEN a.outbox_id::text END,
         CASE a.run_state WHEN 'failed' THEN 'HANDLER_FAILED' WHEN 'canceled' THEN 'CANCELED' WHEN 'superseded' THEN 'SUPERSEDED' END,
         CASE a.run_state WHEN 'failed' THEN 'parse: the document could not be read (5 attempts)'
                          WHEN 'canceled' THEN 'canceled by the operator' WHEN 'superseded' THEN 'a newer version was uploaded' END,
         CASE a.run_state WHEN 'succeeded' THEN 6 + a.executions WHEN 'failed' THEN 11 ELSE 1 END,
         a.created_at, a.completed_at, a.started_at, a.completed_at
    FROM attempts a
   ORDER BY a.created_at
)
INSERT INTO document_compilation_outbox (id, attempt_id, event_type, schema_version, payload, idempotency_key, status,
  dispatch_attempts, available_at, queue_job_id, delivered_at, created_at, updated_at)
SELECT a.outbox_id, a.id, 'document.compile', 1, jsonb_build_object('attemptId', a.id), 'document.compile:' || a.id,
       CASE a.run_state WHEN 'succeeded' THEN 'completed' WHEN 'failed' THEN 'dead' ELSE 'canceled' END,
       a.executions, coalesce(a.started_at + interval '5 minutes', a.created_at),
       CASE WHEN a.executions > 0 THEN a.outbox_id::text END, a.started_at, a.created_at, a.completed_at
  FROM attempts a
 ORDER BY a.created_at`
