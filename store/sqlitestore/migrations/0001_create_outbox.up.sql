-- The outbox table: the contract columns (shared/DESIGN.md), then ours.
-- Timestamps are UTC text in SQLite's datetime() form with microseconds,
-- "YYYY-MM-DD HH:MM:SS.ffffff", so that they sort in time order and SQLite's
-- date functions read them. AUTOINCREMENT keeps ids from being reused after
-- the newest rows are deleted.
CREATE TABLE IF NOT EXISTS {{.Table}} (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id     TEXT    NOT NULL UNIQUE,
    aggregate_type TEXT    NOT NULL,
    aggregate_id   TEXT    NOT NULL,
    event_type     TEXT    NOT NULL,
    payload        TEXT    NOT NULL,
    status         INTEGER NOT NULL DEFAULT 0,
    retry_count    INTEGER NOT NULL DEFAULT 0,
    next_retry_at  TEXT,
    created_at     TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    updated_at     TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    headers        TEXT,
    topic          TEXT,
    partition_key  TEXT,
    last_error     TEXT,
    -- a payload that is not JSON: its bytes, with JSON null in payload
    content_type   TEXT,
    payload_bytes  BLOB,
    -- delayed delivery (also written to next_retry_at) and expiry, UTC text
    deliver_at     TEXT,
    expires_at     TEXT
);

CREATE INDEX IF NOT EXISTS {{index "status_next_retry_at"}} ON {{.Name}} (status, next_retry_at);

CREATE INDEX IF NOT EXISTS {{index "aggregate"}} ON {{.Name}} (aggregate_type, aggregate_id);
