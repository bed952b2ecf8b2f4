-- The claim path: pending rows in id order, covering next_retry_at, so that
-- a claim reads neither the sent rows kept for auditing nor the table, and
-- stops after the first due rows however large the backlog. Claims name it
-- (INDEXED BY) when it exists. Added to existing tables too.
CREATE INDEX IF NOT EXISTS {{index "pending"}} ON {{.Name}} (id, next_retry_at) WHERE status = 0;
