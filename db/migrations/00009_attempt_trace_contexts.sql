-- Migration 0009: the W3C trace context of the Start that created an
-- attempt, for OpenTelemetry tracing (module adapters/otel).
--
-- The outbox payload is fixed by the spec as {"attemptId":"<uuid>"}, so the
-- trace context cannot travel in it. It lives here instead, one row per
-- traced attempt, written by StartAttempt in the same statement as the
-- attempt (only when the caller passes a trace context: an untraced Start
-- writes nothing here) and read, one statement per batch, by a relay or a
-- PostgreSQL source configured to carry it (TraceContextGetMany). A
-- separate table rather than a column keeps the attempt and outbox rows,
-- rewritten on every transition, as narrow as the seed made them; the row
-- goes with its attempt (ON DELETE CASCADE, so Purge needs no change).

-- +goose Up
CREATE TABLE IF NOT EXISTS "document_compilation_trace_contexts" (
  "attempt_id" UUID PRIMARY KEY NOT NULL
    REFERENCES "document_compilation_attempts" ("id") ON DELETE CASCADE,
  -- version-traceid-parentid-flags, lowercase hex (W3C Trace Context).
  "traceparent" TEXT NOT NULL,
  -- Vendor entries, '' when there are none; W3C lets a carrier drop
  -- tracestate beyond 512 characters.
  "tracestate" TEXT NOT NULL DEFAULT '',
  CONSTRAINT "document_compilation_trace_contexts_traceparent_ck"
    CHECK ("traceparent" ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'),
  CONSTRAINT "document_compilation_trace_contexts_tracestate_ck"
    CHECK (length("tracestate") <= 512)
);

-- +goose Down
DROP TABLE IF EXISTS "document_compilation_trace_contexts";
