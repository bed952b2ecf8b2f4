-- The outbox table: the contract columns (shared/DESIGN.md), then ours.
-- Every DATETIME holds UTC, with microseconds. JSON is MySQL 8's JSON type,
-- or on MariaDB a LONGTEXT with a JSON_VALID check. The binary collation
-- compares ids byte for byte.
CREATE TABLE IF NOT EXISTS {{.Table}} (
    id             BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    message_id     VARCHAR(64)     NOT NULL,
    aggregate_type VARCHAR(64)     NOT NULL,
    aggregate_id   VARCHAR(64)     NOT NULL,
    event_type     VARCHAR(64)     NOT NULL,
    payload        JSON            NOT NULL,
    status         TINYINT         NOT NULL DEFAULT 0 COMMENT '0 pending, 1 sent, 2 dead',
    retry_count    INT             NOT NULL DEFAULT 0,
    next_retry_at  DATETIME(6)     NULL,
    created_at     DATETIME(6)     NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at     DATETIME(6)     NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    headers        JSON            NULL,
    topic          VARCHAR(255)    NULL,
    partition_key  VARCHAR(255)    NULL,
    last_error     TEXT            NULL,
    -- a payload that is not JSON: its bytes, with JSON null in payload
    content_type   VARCHAR(255)    NULL,
    payload_bytes  LONGBLOB        NULL,
    -- delayed delivery (also written to next_retry_at) and expiry, in UTC
    deliver_at     DATETIME(6)     NULL,
    expires_at     DATETIME(6)     NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uk_message_id (message_id),
    KEY idx_status_next_retry (status, next_retry_at),
    KEY idx_aggregate (aggregate_type, aggregate_id),
    KEY idx_status_id (status, id),
    -- ordered claims: each aggregate's first pending and first dead row (ordered.go)
    KEY idx_status_aggregate (status, aggregate_type, aggregate_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
