-- Ordered claims (outbox.WithOrdering): each aggregate's pending and dead
-- rows in id order, with their status, so that a claim checks "no earlier
-- pending row" with one probe and finds every aggregate's first row in one
-- pass over the index, without reading the table or the sent rows kept for
-- auditing. Claims name it (INDEXED BY) when it exists. Added to existing
-- tables too.
CREATE INDEX IF NOT EXISTS {{index "head"}} ON {{.Name}} (aggregate_type, aggregate_id, id, status) WHERE status IN (0, 2);
