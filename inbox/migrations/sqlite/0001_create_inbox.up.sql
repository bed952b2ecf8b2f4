-- The inbox: one row per (consumer, message) that a consumer has processed.
-- processed_at is Unix time in microseconds.
CREATE TABLE IF NOT EXISTS {{table}} (
	consumer     TEXT    NOT NULL,
	message_id   TEXT    NOT NULL,
	processed_at INTEGER NOT NULL,
	PRIMARY KEY (consumer, message_id)
) WITHOUT ROWID;
-- Retention deletes by age, one consumer at a time.
CREATE INDEX IF NOT EXISTS {{index}} ON {{tablename}} (consumer, processed_at);
-- The per-aggregate sequence guard: the last sequence number a consumer
-- applied for each aggregate.
CREATE TABLE IF NOT EXISTS {{seqtable}} (
	consumer     TEXT    NOT NULL,
	aggregate    TEXT    NOT NULL,
	last_seq     INTEGER NOT NULL,
	updated_at   INTEGER NOT NULL,
	PRIMARY KEY (consumer, aggregate)
) WITHOUT ROWID;
