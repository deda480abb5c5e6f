'use strict';
// The wire contract's envelopes (docs/DESIGN.md, "The wire contract"):
// decoding and validating a command record, encoding a reply. Anything that
// does not validate throws InvalidMessage, and the record is dead-lettered.

const crypto = require('node:crypto');

const LIMITS = {
  value: 1 << 20, // a whole record value
  payload: (1 << 20) - (64 << 10), // the payload member's JSON text
  name: 255, // saga_type, step, aggregate_id (bytes)
  reason: 1024, // a reply's reason (bytes)
  ownHeader: 1024, // one of our headers' values (bytes)
  headers: 16 << 10, // all headers together (bytes)
  attempt: 2147483647,
  depth: 10000, // nesting (encoding/json's limit)
};
const ACTIONS = ['forward', 'compensate', 'query'];
const OWN_HEADERS = ['message-id', 'saga-id', 'content-type', 'dlq-reason', 'dlq-original-topic', 'dlq-original-offset'];
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const NIL_UUID = '00000000-0000-0000-0000-000000000000';
const TOPIC_RE = /^[a-zA-Z0-9._-]{1,249}$/;
const RFC3339_RE = /^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;
// An unpaired UTF-16 surrogate: JSON.parse accepts "\ud800", Postgres does not.
const LONE_SURROGATE_RE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

class InvalidMessage extends Error {}

const invalid = (why) => new InvalidMessage(`invalid message: ${why}`);
const utf8 = new TextDecoder('utf-8', { fatal: true });
const bytes = (s) => Buffer.byteLength(s, 'utf8');

// text decodes b as UTF-8 text without NUL, or throws.
function text(what, b) {
  let s;
  try {
    s = utf8.decode(b);
  } catch {
    throw invalid(`${what} is not valid UTF-8`);
  }
  checkString(what, s);
  return s;
}

function checkString(what, s) {
  if (s.includes('\u0000')) throw invalid(`${what} contains a NUL character (U+0000)`);
  if (LONE_SURROGATE_RE.test(s)) throw invalid(`${what} contains an unpaired surrogate`);
}

// checkValue walks every string (member names included) and number of v,
// without recursion (a deeply nested value must not overflow the stack),
// refusing nesting deeper than the Go decoder reads.
function checkValue(where, v) {
  const todo = [[v, 0]];
  while (todo.length > 0) {
    const [x, depth] = todo.pop();
    if (typeof x === 'string') {
      checkString(`a string in ${where}`, x);
    } else if (typeof x === 'number') {
      if (!Number.isFinite(x)) throw invalid(`a number in ${where} is out of range`);
    } else if (x && typeof x === 'object') {
      if (depth >= LIMITS.depth) throw invalid(`${where} is nested deeper than ${LIMITS.depth}`);
      if (Array.isArray(x)) {
        for (const y of x) todo.push([y, depth + 1]);
      } else {
        for (const [k, y] of Object.entries(x)) {
          checkString(`a member name in ${where}`, k);
          todo.push([y, depth + 1]);
        }
      }
    }
  }
}

// headerMap turns kafkajs headers into a map of strings, checking that they
// are text within bounds and that ours appear once.
function headerMap(headers) {
  const out = {};
  let total = 0;
  for (const [k, raw] of Object.entries(headers || {})) {
    checkString('a header name', k);
    const values = Array.isArray(raw) ? raw : [raw];
    if (values.length > 1 && OWN_HEADERS.includes(k)) throw invalid(`header "${k}" appears ${values.length} times`);
    for (const v of values) {
      const s = v === null || v === undefined ? '' : text(`header "${k}"`, Buffer.isBuffer(v) ? v : Buffer.from(String(v)));
      if (OWN_HEADERS.includes(k) && bytes(s) > LIMITS.ownHeader) throw invalid(`header "${k}" is over ${LIMITS.ownHeader} bytes`);
      total += bytes(k) + bytes(s);
      out[k] = s;
    }
  }
  if (total > LIMITS.headers) throw invalid(`the headers are over ${LIMITS.headers} bytes`);
  return out;
}

// recordMessageID is the record's message-id header, required: consumers
// dedupe on it.
function recordMessageID(headers) {
  const id = headers['message-id'];
  if (id === undefined) throw invalid('header "message-id" is missing');
  if (!UUID_RE.test(id) || id === NIL_UUID) throw invalid(`header "message-id" ${JSON.stringify(id)} is not a UUID`);
  return id.toLowerCase();
}

function field(obj, name, type, required = true) {
  const v = obj[name];
  if (v === undefined || v === null) {
    if (required) throw invalid(`field "${name}" is missing`);
    return undefined;
  }
  // eslint-disable-next-line valid-typeof
  if (typeof v !== type) throw invalid(`field "${name}" has JSON type ${typeof v}, want ${type}`);
  return v;
}

function uuidField(obj, name) {
  const v = field(obj, name, 'string');
  if (!UUID_RE.test(v) || v === NIL_UUID) throw invalid(`field "${name}" ${JSON.stringify(v)} is not a UUID`);
  return v.toLowerCase();
}

function nameField(obj, name, required) {
  const v = field(obj, name, 'string', required) ?? '';
  if (required && v === '') throw invalid(`field "${name}" is missing`);
  if (bytes(v) > LIMITS.name) throw invalid(`field "${name}" is over ${LIMITS.name} bytes`);
  return v;
}

// decodeCommand parses and validates a command record's value and checks
// its headers against the body. Whatever goes wrong is an InvalidMessage:
// retrying a record that does not decode would never help.
function decodeCommand(value, headers) {
  try {
    return decode(value, headers);
  } catch (e) {
    if (e instanceof InvalidMessage) throw e;
    throw invalid(`cannot decode: ${e.message}`);
  }
}

function decode(value, headers) {
  if (!value || value.length === 0) throw invalid('empty value');
  if (value.length > LIMITS.value) throw invalid(`the value is ${value.length} bytes, over ${LIMITS.value}`);
  let obj;
  try {
    obj = JSON.parse(text('the value', value));
  } catch (e) {
    if (e instanceof InvalidMessage) throw e;
    throw invalid(`not JSON: ${e.message}`);
  }
  if (!obj || typeof obj !== 'object' || Array.isArray(obj)) throw invalid('the value is not a JSON object');
  checkValue('the value', obj);
  const cmd = {
    message_id: uuidField(obj, 'message_id'),
    saga_id: uuidField(obj, 'saga_id'),
    saga_type: nameField(obj, 'saga_type', true),
    aggregate_id: nameField(obj, 'aggregate_id', false),
    step: nameField(obj, 'step', true),
    action: field(obj, 'action', 'string'),
    attempt: field(obj, 'attempt', 'number'),
    reply_to: field(obj, 'reply_to', 'string'),
    sent_at: field(obj, 'sent_at', 'string'),
    payload: obj.payload ?? null,
  };
  if (!ACTIONS.includes(cmd.action)) throw invalid(`field "action" ${JSON.stringify(cmd.action)}: want forward, compensate or query`);
  if (!Number.isInteger(cmd.attempt) || cmd.attempt < 1 || cmd.attempt > LIMITS.attempt) throw invalid(`field "attempt" ${cmd.attempt}: want an integer from 1 to ${LIMITS.attempt}`);
  if (!TOPIC_RE.test(cmd.reply_to) || cmd.reply_to === '.' || cmd.reply_to === '..') throw invalid('field "reply_to" is not a legal Kafka topic name');
  if (!RFC3339_RE.test(cmd.sent_at) || Number.isNaN(Date.parse(cmd.sent_at))) throw invalid('field "sent_at" is not an RFC 3339 timestamp');
  if (cmd.payload !== null) {
    if (typeof cmd.payload !== 'object' || Array.isArray(cmd.payload)) throw invalid('field "payload" is not a JSON object');
    // Only a value over the payload bound can hold a payload over it.
    if (value.length > LIMITS.payload && bytes(JSON.stringify(cmd.payload)) > LIMITS.payload) throw invalid(`field "payload" is over ${LIMITS.payload} bytes`);
  }
  if (headers['message-id'] !== undefined && headers['message-id'].toLowerCase() !== cmd.message_id) {
    throw invalid(`header "message-id" is ${JSON.stringify(headers['message-id'])} but body message_id is ${cmd.message_id}`);
  }
  if (headers['saga-id'] !== undefined && headers['saga-id'].toLowerCase() !== cmd.saga_id) {
    throw invalid(`header "saga-id" is ${JSON.stringify(headers['saga-id'])} but body saga_id is ${cmd.saga_id}`);
  }
  return cmd;
}

// cut shortens s to at most max bytes of UTF-8 without cutting a character.
function cut(s, max) {
  if (bytes(s) <= max) return s;
  let out = '';
  for (const ch of s) {
    if (bytes(out + ch) > max - 3) break;
    out += ch;
  }
  return `${out}...`;
}

// reply builds the reply to cmd (outcome, reason, payload) as the record
// the relay publishes: keyed by saga id, with the wire headers.
function replyRecord(cmd, res) {
  const reply = {
    message_id: crypto.randomUUID(),
    in_reply_to: cmd.message_id,
    saga_id: cmd.saga_id,
    step: cmd.step,
    action: cmd.action,
    outcome: res.outcome,
  };
  if (res.reason) reply.reason = cut(res.reason, LIMITS.reason);
  if (res.payload !== null && res.payload !== undefined) reply.payload = res.payload;
  return {
    topic: cmd.reply_to,
    key: cmd.saga_id,
    value: JSON.stringify(reply),
    headers: { 'message-id': reply.message_id, 'saga-id': cmd.saga_id, 'content-type': 'application/json' },
  };
}

module.exports = { InvalidMessage, headerMap, recordMessageID, decodeCommand, replyRecord, cut, TOPIC_RE };
