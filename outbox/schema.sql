-- coalesce outbox and effect record, schema version 2.
--
-- Idempotent: running it again (coalesce outbox migrate, outbox.Migrate, or
-- your own migration tool) changes nothing that is already there, and a later
-- version of this file upgrades an earlier one in place (ADD COLUMN IF NOT
-- EXISTS and the like). Postgres 12 or later.
--
-- Producers, in any language, write an event inside their own transaction:
--
--   INSERT INTO coalesce_outbox (type, args) VALUES ($1, $2);
--   INSERT INTO coalesce_outbox (type, args, key, traceparent) VALUES ($1, $2, $3, $4);
--
-- args is the event's JSON as text, kept as written: the relay checks it
-- (I-JSON, integers beyond 2^53 refused) when it decides the row, and moves a
-- row it can never decide to coalesce_outbox_dead with the reason.

CREATE TABLE IF NOT EXISTS coalesce_outbox (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    type        text NOT NULL,
    args        text NOT NULL,
    key         text,
    traceparent text,
    -- When the row was written (clock_timestamp, not the transaction's start):
    -- the relay's lag is measured from here.
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE coalesce_outbox IS 'coalesce outbox, schema 2: INSERT INTO coalesce_outbox (type, args) VALUES ($1, $2) in your transaction; a relay submits committed rows';

-- Rows the relay can never decide (bad args, no policy for the type, a job
-- too large for one message), with why. Nothing else reads them: replay one
-- after fixing the cause with
--   WITH d AS (DELETE FROM coalesce_outbox_dead WHERE dead_id = $1 RETURNING *)
--   INSERT INTO coalesce_outbox (type, args, key, traceparent) SELECT type, args, key, traceparent FROM d;
-- Keyed by an identity of its own: the outbox's ids may start over (the table
-- created again, TRUNCATE ... RESTART IDENTITY, a switchover without its
-- sequences), and a dead row must never be dropped for an id seen before.
CREATE TABLE IF NOT EXISTS coalesce_outbox_dead (
    dead_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id          bigint NOT NULL, -- the outbox row's id (not unique: see above)
    type        text NOT NULL,
    args        text NOT NULL,
    key         text,
    traceparent text,
    created_at  timestamptz NOT NULL,
    dead_at     timestamptz NOT NULL DEFAULT now(),
    error_code  text NOT NULL, -- unsafe_integer, invalid_json, invalid_type, no_policy, job_too_large, ...
    error_field text,          -- the field it concerns: type, args.tenant_id, key, traceparent
    error       text NOT NULL
);
COMMENT ON TABLE coalesce_outbox_dead IS 'coalesce outbox, schema 2: rows the relay could never decide, with the reason';

-- Schema 1 keyed the dead rows by the outbox id (a second dead row with an id
-- seen before was dropped): upgraded in place once, keeping its rows. Checked
-- first, so a re-run takes no lock.
DO $$
DECLARE
    pk text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'coalesce_outbox_dead'::regclass
                   AND attname = 'dead_id' AND NOT attisdropped) THEN
        ALTER TABLE coalesce_outbox_dead ADD COLUMN dead_id bigint GENERATED ALWAYS AS IDENTITY;
        SELECT conname INTO pk FROM pg_constraint WHERE conrelid = 'coalesce_outbox_dead'::regclass AND contype = 'p';
        IF pk IS NOT NULL THEN
            EXECUTE format('ALTER TABLE coalesce_outbox_dead DROP CONSTRAINT %I', pk);
        END IF;
        ALTER TABLE coalesce_outbox_dead ADD PRIMARY KEY (dead_id);
    END IF;
    IF to_regclass('coalesce_outbox_dead_outbox_id') IS NULL THEN
        CREATE INDEX coalesce_outbox_dead_outbox_id ON coalesce_outbox_dead (id);
    END IF;
END
$$;

-- The durable effect record: a worker that must never repeat an effect
-- inserts its effect key in the transaction that makes the effect,
--   INSERT INTO coalesce_effects (effect_key, job_type, round) VALUES ($1, $2, $3)
--     ON CONFLICT (effect_key) DO NOTHING RETURNING effect_key;
-- and runs the effect only when a row comes back; none: it was done before.
CREATE TABLE IF NOT EXISTS coalesce_effects (
    effect_key text PRIMARY KEY,
    job_type   text NOT NULL DEFAULT '',
    round      text NOT NULL DEFAULT '',
    result     text,
    created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE coalesce_effects IS 'coalesce effect record, schema 2: one row per effect done; INSERT ... ON CONFLICT (effect_key) DO NOTHING RETURNING effect_key decides whether it runs';

-- Wake the relays at commit (LISTEN coalesce_outbox); one notification per
-- statement, and Postgres folds those of one transaction into one. Relays
-- poll too, so a missed notification only delays.
CREATE OR REPLACE FUNCTION coalesce_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('coalesce_outbox', '');
    RETURN NULL;
END
$$;
-- Created only when missing: a re-run takes no lock that would stall producers.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                   WHERE tgname = 'coalesce_outbox_notify' AND tgrelid = 'coalesce_outbox'::regclass) THEN
        CREATE TRIGGER coalesce_outbox_notify AFTER INSERT ON coalesce_outbox
            FOR EACH STATEMENT EXECUTE FUNCTION coalesce_outbox_notify();
    END IF;
END
$$;
