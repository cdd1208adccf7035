\set n :base + :k * 8 + :client_id
\set k :k + 1
WITH existing AS (
  SELECT a.id, a.tenant_id, a.knowledge_space_id, a.document_asset_id, a.document_version, a.publication_generation_id, a.base_head_revision, a.candidate_publication_id, a.candidate_fingerprint, a.checkpoint, a.run_state, a.active_slot, a.execution_attempts, a.max_execution_attempts, a.queue_job_id, a.external_job_id, a.worker_id, a.lease_token, a.lease_expires_at, a.heartbeat_at, a.retry_at, a.last_error_code, a.last_error_message, a.row_version, a.created_at, a.updated_at, a.started_at, a.completed_at
    FROM document_compilation_attempts a
   WHERE a.tenant_id = 'floor'::text
     AND a.knowledge_space_id = '00000000-0000-0000-0000-0000000000aa'::uuid
     AND a.document_asset_id = md5(:n::text)::uuid
     AND a.document_version = 1::integer
     AND a.active_slot = 1
),
eligible AS (
  SELECT 1
    FROM knowledge_spaces ks
    JOIN document_assets da
      ON da.knowledge_space_id = ks.id
   WHERE ks.id = '00000000-0000-0000-0000-0000000000aa'::uuid
     AND ks.tenant_id = 'floor'::text
     AND da.id = md5(:n::text)::uuid
     AND da.version = 1::integer
     AND NOT EXISTS (SELECT 1 FROM existing)
     AND coalesce((
           SELECT h.head_revision
             FROM projection_set_publication_heads h
            WHERE h.tenant_id = 'floor'::text
              AND h.knowledge_space_id = '00000000-0000-0000-0000-0000000000aa'::uuid
         ), 0) = 0::integer::integer
),
inserted AS (
  INSERT INTO document_compilation_attempts (
    id, tenant_id, knowledge_space_id, document_asset_id, document_version,
    publication_generation_id, base_head_revision, checkpoint, run_state,
    active_slot, execution_attempts, max_execution_attempts, row_version,
    created_at, updated_at
  )
  SELECT gen_random_uuid(), 'floor'::text, '00000000-0000-0000-0000-0000000000aa'::uuid, md5(:n::text)::uuid, 1::integer,
         '5d62eb00-2bba-49c4-b605-03724e22a608'::uuid, 0::integer::integer, 'queued', 'dispatch_pending',
         1, 0, 5::integer::integer, 0,
         coalesce(NULL::timestamp with time zone::timestamptz, now()),
         coalesce(NULL::timestamp with time zone::timestamptz, now())
    FROM eligible
  
  
  ON CONFLICT (tenant_id, knowledge_space_id, document_asset_id, document_version, active_slot)
    DO NOTHING
  RETURNING id, tenant_id, knowledge_space_id, document_asset_id, document_version, publication_generation_id, base_head_revision, candidate_publication_id, candidate_fingerprint, checkpoint, run_state, active_slot, execution_attempts, max_execution_attempts, queue_job_id, external_job_id, worker_id, lease_token, lease_expires_at, heartbeat_at, retry_at, last_error_code, last_error_message, row_version, created_at, updated_at, started_at, completed_at
),
outbox AS (
  INSERT INTO document_compilation_outbox (
    id, attempt_id, event_type, schema_version, payload, idempotency_key,
    status, dispatch_attempts, available_at, created_at, updated_at
  )
  SELECT gen_random_uuid(), i.id, 'document.compile', 1,
         jsonb_build_object('attemptId', i.id),
         'document.compile:' || i.id::text,
         'pending', 0,
         
         CASE WHEN false::boolean::boolean THEN 'infinity'::timestamptz
              ELSE coalesce(NULL::timestamp with time zone::timestamptz, NULL::timestamp with time zone::timestamptz, now())
         END,
         i.created_at, i.created_at
    FROM inserted i
  
  
  
  RETURNING id
)
SELECT id, tenant_id, knowledge_space_id, document_asset_id, document_version, publication_generation_id, base_head_revision, candidate_publication_id, candidate_fingerprint, checkpoint, run_state, active_slot, execution_attempts, max_execution_attempts, queue_job_id, external_job_id, worker_id, lease_token, lease_expires_at, heartbeat_at, retry_at, last_error_code, last_error_message, row_version, created_at, updated_at, started_at, completed_at FROM inserted
UNION ALL
SELECT id, tenant_id, knowledge_space_id, document_asset_id, document_version, publication_generation_id, base_head_revision, candidate_publication_id, candidate_fingerprint, checkpoint, run_state, active_slot, execution_attempts, max_execution_attempts, queue_job_id, external_job_id, worker_id, lease_token, lease_expires_at, heartbeat_at, retry_at, last_error_code, last_error_message, row_version, created_at, updated_at, started_at, completed_at FROM existing;
