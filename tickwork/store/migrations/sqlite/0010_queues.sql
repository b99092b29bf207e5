-- Queues: a task is claimed only by nodes that serve its queue (@app.task(queue=...),
-- schedule(queue=...); 'default' unless told).
ALTER TABLE tickwork_tasks ADD COLUMN queue TEXT NOT NULL DEFAULT 'default';
