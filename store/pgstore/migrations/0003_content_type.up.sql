-- Messages that are not plain application/json (docs/table-contract.md):
-- content_type is the payload's media type (NULL: application/json), and a
-- payload that is not JSON is kept as bytes in payload_bytes, with JSON null
-- in payload, so that payload stays NOT NULL and jsonb for every older
-- writer and reader. Adding NULL columns without a default only changes the
-- catalog: no row is rewritten.
ALTER TABLE {{table}}
    ADD COLUMN IF NOT EXISTS content_type  varchar(255) NULL,
    ADD COLUMN IF NOT EXISTS payload_bytes bytea        NULL;
