-- The inbox: one row per (consumer, message) that a consumer has processed.
-- VARBINARY compares bytes: no collation folds case or ignores trailing
-- spaces, so two different message ids never collide.
CREATE TABLE IF NOT EXISTS {{table}} (
	consumer     VARBINARY(64)  NOT NULL,
	message_id   VARBINARY(255) NOT NULL,
	processed_at DATETIME(6)    NOT NULL,
	PRIMARY KEY (consumer, message_id),
	KEY inbox_processed_idx (consumer, processed_at)
) ENGINE = InnoDB;
-- The per-aggregate sequence guard: the last sequence number a consumer
-- applied for each aggregate.
CREATE TABLE IF NOT EXISTS {{seqtable}} (
	consumer     VARBINARY(64)  NOT NULL,
	aggregate    VARBINARY(255) NOT NULL,
	last_seq     BIGINT         NOT NULL,
	updated_at   DATETIME(6)    NOT NULL,
	PRIMARY KEY (consumer, aggregate)
) ENGINE = InnoDB;
