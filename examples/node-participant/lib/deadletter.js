'use strict';
// Dead-letter records, as the Go inbox builds them (inbox/deadletter.go):
// the original key, value and headers (each header value cut to 1 KiB, each
// header name to 256 bytes) and the dead-letter headers last (dlq-reason cut
// to 1 KiB, the original topic, partition and offset, dlq-shortened). A
// record over DEAD_LETTER_BYTES, or one the broker refuses for what it is
// (too large, invalid), is replaced by its shortened form: the key's and
// value's first 1 KiB, header values cut to 128 bytes, copied headers
// dropped from the end until the rest fits, and dlq-shortened "true". The
// original coordinates say where the whole record still is.

const { cut } = require('./wire');

// As the Go inbox's DeadLetterBytesDefault, DeadLetterValueBytesDefault,
// MaxReasonBytes and MaxDeadHeaderBytes.
const DEAD_LETTER_BYTES = 900 << 10;
const VALUE_BYTES = 1 << 10;
const REASON_BYTES = 1 << 10;
const HEADER_BYTES = 1 << 10;
const SHORT_HEADER_BYTES = 128;
const HEADER_NAME_BYTES = 256;
const DLQ_HEADERS = ['dlq-reason', 'dlq-original-topic', 'dlq-original-offset', 'dlq-original-partition', 'dlq-shortened'];

// The Kafka error types that refuse a record for what it is (the Go inbox's
// refused): writing it again cannot succeed.
const REFUSED = new Set([
  'MESSAGE_TOO_LARGE', 'RECORD_LIST_TOO_LARGE', 'INVALID_RECORD', 'CORRUPT_MESSAGE',
  'INVALID_TIMESTAMP', 'UNSUPPORTED_FOR_MESSAGE_FORMAT', 'INVALID_REQUIRED_ACKS',
]);

// refusedCause returns the error in e's cause chain by which the broker
// refused the record for what it is, or null (an outage: retry).
function refusedCause(e) {
  for (let x = e, depth = 0; x && depth < 10; x = x.cause, depth++) {
    if (typeof x.type === 'string' && REFUSED.has(x.type)) return x;
  }
  return null;
}

const asBuffer = (v) => (v === null || v === undefined || Buffer.isBuffer(v) ? v : Buffer.from(String(v)));
const cutBuffer = (b, n) => (b === null || b === undefined || b.length <= n ? b : b.subarray(0, n));
const size = (b) => (b === null || b === undefined ? 0 : b.length);

// cutName shortens a header name to at most max bytes of UTF-8, on a
// character boundary.
function cutName(s, max) {
  if (Buffer.byteLength(s) <= max) return s;
  let out = '';
  for (const ch of s) {
    if (Buffer.byteLength(out + ch) > max) break;
    out += ch;
  }
  return out;
}

// copied returns m's headers as [name, value] pairs (a repeated header once
// per value), values cut to valueMax bytes, leaving out the dead-letter
// headers (the dead letter sets its own).
function copied(headers, valueMax) {
  const out = [];
  for (const [k, raw] of Object.entries(headers || {})) {
    if (DLQ_HEADERS.includes(k)) continue;
    for (const v of Array.isArray(raw) ? raw : [raw]) out.push([cutName(k, HEADER_NAME_BYTES), cutBuffer(asBuffer(v), valueMax)]);
  }
  return out;
}

const pairsBytes = (pairs) => pairs.reduce((n, [k, v]) => n + Buffer.byteLength(k) + size(v), 0);

// toHeaders turns pairs into kafkajs' headers object (repeated names as
// arrays, in order).
function toHeaders(pairs) {
  const out = {};
  for (const [k, v] of pairs) {
    if (!(k in out)) out[k] = v;
    else if (Array.isArray(out[k])) out[k].push(v);
    else out[k] = [out[k], v];
  }
  return out;
}

function dlqPairs(where, reason, shortened) {
  return [
    ['dlq-reason', Buffer.from(cut(reason, REASON_BYTES))],
    ['dlq-original-topic', Buffer.from(where.topic)],
    ['dlq-original-offset', Buffer.from(String(where.offset))],
    ['dlq-original-partition', Buffer.from(String(where.partition))],
    ['dlq-shortened', Buffer.from(String(shortened))],
  ];
}

// shortDeadLetter is the shortened dead letter of record m (found at where)
// with reason.
function shortDeadLetter(where, m, reason) {
  const own = dlqPairs(where, reason, true);
  const budget = DEAD_LETTER_BYTES - 2 * VALUE_BYTES - pairsBytes(own);
  const pairs = copied(m.headers, SHORT_HEADER_BYTES);
  while (pairs.length > 0 && pairsBytes(pairs) > budget) pairs.pop();
  return { key: cutBuffer(asBuffer(m.key), VALUE_BYTES), value: cutBuffer(asBuffer(m.value), VALUE_BYTES), headers: toHeaders([...pairs, ...own]) };
}

// deadLetter is the dead letter of record m (found at where) with reason;
// shortened if it would be over DEAD_LETTER_BYTES.
function deadLetter(where, m, reason) {
  const pairs = [...copied(m.headers, HEADER_BYTES), ...dlqPairs(where, reason, false)];
  if (size(asBuffer(m.key)) + size(asBuffer(m.value)) + pairsBytes(pairs) > DEAD_LETTER_BYTES) return shortDeadLetter(where, m, reason);
  return { key: m.key, value: m.value, headers: toHeaders(pairs) };
}

module.exports = { deadLetter, shortDeadLetter, refusedCause, DEAD_LETTER_BYTES, VALUE_BYTES, SHORT_HEADER_BYTES };
