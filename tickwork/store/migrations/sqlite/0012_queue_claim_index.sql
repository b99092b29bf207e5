-- A node claims queue by queue and, within a queue, priority level by level (higher
-- first), each an index walk from the level's oldest due task: due tasks of queues it
-- does not serve, or that are paused, are never walked past, and a task of a higher
-- priority is found at once behind any backlog of lower ones.
CREATE INDEX tickwork_tasks_queue_claim ON tickwork_tasks (status, queue, priority DESC, next_run_at, id);
