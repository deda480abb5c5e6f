-- The W3C trace context a saga was started with (or the span of its start
-- when tracing is on): every command of the saga carries it as the Kafka
-- headers traceparent and tracestate. Empty when the start carried none and
-- tracing is off. A constant default adds the columns without a rewrite.
ALTER TABLE {{schema}}.sagas ADD COLUMN IF NOT EXISTS traceparent text NOT NULL DEFAULT '';
ALTER TABLE {{schema}}.sagas ADD COLUMN IF NOT EXISTS tracestate text NOT NULL DEFAULT '';
