-- The inbox: one row per (consumer, message) that a consumer has processed.
-- The primary key is what detects a duplicate: a second insert of the same
-- pair waits for the first transaction and then finds the row.
CREATE TABLE IF NOT EXISTS {{table}} (
	consumer     varchar(64)  NOT NULL,
	message_id   varchar(255) NOT NULL,
	processed_at timestamptz  NOT NULL,
	PRIMARY KEY (consumer, message_id)
);
-- Retention deletes by age, one consumer at a time.
CREATE INDEX IF NOT EXISTS {{index}} ON {{table}} (consumer, processed_at);
-- The per-aggregate sequence guard: the last sequence number a consumer
-- applied for each aggregate.
CREATE TABLE IF NOT EXISTS {{seqtable}} (
	consumer     varchar(64)  NOT NULL,
	aggregate    varchar(255) NOT NULL,
	last_seq     bigint       NOT NULL,
	updated_at   timestamptz  NOT NULL,
	PRIMARY KEY (consumer, aggregate)
);
