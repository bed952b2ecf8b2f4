-- Delayed delivery and expiry (docs/table-contract.md): deliver_at is the
-- time a writer asked the message to go out, not before (NULL: at once),
-- expires_at the time after which a relay marks it dead instead of
-- publishing it (NULL: never). A writer that sets deliver_at also writes it
-- to next_retry_at, which the claims filter on, so no claim or index
-- changes. Adding NULL columns without a default only changes the catalog:
-- no row is rewritten.
ALTER TABLE {{table}}
    ADD COLUMN IF NOT EXISTS deliver_at timestamptz NULL,
    ADD COLUMN IF NOT EXISTS expires_at timestamptz NULL;
