-- Ordered claims (outbox.WithOrdering) find each aggregate's head, its first
-- pending or dead row, by stepping through this index one aggregate at a
-- time, and check that a row has no earlier pending row with one probe into
-- it. It holds only pending and dead rows, so it stays small however many
-- sent rows are kept, and costs one index entry per message written. The "C"
-- collation makes its order the byte order in which the relay keeps its
-- round-robin place. On a large existing table, create it CONCURRENTLY by
-- hand first, under this name, to avoid blocking writes while it builds.
CREATE INDEX IF NOT EXISTS {{head_index}} ON {{table}}
    (aggregate_type COLLATE "C", aggregate_id COLLATE "C", id) WHERE status IN (0, 2);
