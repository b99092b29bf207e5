-- A node claims queue by queue, each an index walk from its oldest due task: due tasks of
-- queues it does not serve, or that are paused, are never walked past.
CREATE INDEX tickwork_tasks_queue_claim ON tickwork_tasks (queue, next_run_at, priority DESC, id)
    WHERE status = 'PENDING';
