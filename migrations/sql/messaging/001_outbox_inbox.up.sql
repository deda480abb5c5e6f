-- Transactional outbox: rows are written in the same transaction as the state
-- change that causes them, and published to Kafka by a relay.
CREATE TABLE {{schema}}.outbox (
    id           bigserial PRIMARY KEY,
    topic        text        NOT NULL,
    key          text        NOT NULL,
    value        bytea       NOT NULL,
    headers      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    available_at timestamptz NOT NULL DEFAULT now(),
    created_at   timestamptz NOT NULL DEFAULT now(),
    sent_at      timestamptz,
    attempts     integer     NOT NULL DEFAULT 0,
    last_error   text,
    dead_at      timestamptz
);
-- The relay reads only unsent, live rows in id order.
CREATE INDEX outbox_unsent_idx ON {{schema}}.outbox (id) WHERE sent_at IS NULL AND dead_at IS NULL;
-- Retention deletes sent rows by age.
CREATE INDEX outbox_sent_at_idx ON {{schema}}.outbox (sent_at) WHERE sent_at IS NOT NULL;

-- Inbox: one row per consumed message id; the primary key is the dedupe.
CREATE TABLE {{schema}}.inbox (
    message_id  uuid        PRIMARY KEY,
    topic       text        NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX inbox_received_at_idx ON {{schema}}.inbox (received_at);
