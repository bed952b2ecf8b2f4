-- The outbox table: the contract columns (shared/DESIGN.md), then pgstore's own.
-- {{table}} and the index names are filled in by Migrate with quoted identifiers.
-- Every statement is idempotent; Migrate runs the file in one transaction
-- holding an advisory lock, so concurrent migrations wait for each other.

CREATE TABLE IF NOT EXISTS {{table}} (
    id             bigserial    PRIMARY KEY,
    message_id     varchar(64)  NOT NULL UNIQUE,
    aggregate_type varchar(64)  NOT NULL,
    aggregate_id   varchar(64)  NOT NULL,
    event_type     varchar(64)  NOT NULL,
    payload        jsonb        NOT NULL,
    status         smallint     NOT NULL DEFAULT 0,
    retry_count    integer      NOT NULL DEFAULT 0,
    next_retry_at  timestamptz  NULL,
    created_at     timestamptz  NOT NULL DEFAULT now(),
    updated_at     timestamptz  NOT NULL DEFAULT now()
);

-- Optional columns: a table that has only the contract columns gets them here.
ALTER TABLE {{table}}
    ADD COLUMN IF NOT EXISTS headers       jsonb        NULL,
    ADD COLUMN IF NOT EXISTS topic         varchar(255) NULL,
    ADD COLUMN IF NOT EXISTS partition_key varchar(255) NULL,
    ADD COLUMN IF NOT EXISTS last_error    text         NULL;

-- The contract's indexes.
CREATE INDEX IF NOT EXISTS {{status_index}} ON {{table}} (status, next_retry_at);
CREATE INDEX IF NOT EXISTS {{aggregate_index}} ON {{table}} (aggregate_type, aggregate_id);

-- The claim path walks pending rows in id order; sent and dead rows stay out of it.
CREATE INDEX IF NOT EXISTS {{pending_index}} ON {{table}} (id) WHERE status = 0;
