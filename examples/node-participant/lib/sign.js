'use strict';
// Record signatures (docs/DESIGN.md, "Signed records"): the orchestrator
// signs every command with a key of its own, this participant verifies it
// with the orchestrator's keys and signs its replies with a key of its own.
// The signature is HMAC-SHA256, hex, over the canonical bytes: the text
// "sagaflow-sig-v1", then the key id, the topic, the record key, the
// headers message-id, saga-id, content-type, traceparent, tracestate (first
// occurrence; absent: empty) and the record value, each as its length in 4
// bytes big-endian and its bytes.
//
//   SAGAFLOW_SECURITY_ORCHESTRATOR_KEYS  "id:secret,..." the orchestrator's
//       keys commands are verified with (secret: base64 of at least 32
//       bytes, or "hex:" and hex digits); unset: commands are not verified
//   SAGAFLOW_SECURITY_PARTICIPANT_KEYS   "participant:id:secret,...": this
//       participant's entry (its first) signs its replies; none: unsigned
//   SAGAFLOW_SECURITY_ALLOW_UNSIGNED_COMMANDS  true: execute unsigned
//       commands while keys are set (a migration window; default false)

const crypto = require('node:crypto');

const HEADER_KEY_ID = 'sagaflow-key-id';
const HEADER_SIGNATURE = 'sagaflow-signature';
const VERSION = Buffer.from('sagaflow-sig-v1');
const SIGNED_HEADERS = ['message-id', 'saga-id', 'content-type', 'traceparent', 'tracestate'];
const MIN_SECRET = 32;
const KEY_ID_RE = /^[!-~]{1,64}$/;
const BASE64_RE = /^[A-Za-z0-9+/_-]*={0,2}$/;

// SignatureError: the command does not verify (lib/wire.js' InvalidMessage
// is given by the caller, so it is dead-lettered like any invalid record).
const toBuffer = (v) => (v === null || v === undefined ? Buffer.alloc(0) : Buffer.isBuffer(v) ? v : Buffer.from(String(v)));
const first = (raw) => (Array.isArray(raw) ? raw[0] : raw);

function field(b) {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(b.length);
  return [len, b];
}

// canonical returns the bytes a signature covers; headers maps a name to
// a string, a Buffer or (kafkajs, repeated) an array of them.
function canonical(keyID, topic, key, value, headers) {
  const parts = [VERSION, ...field(Buffer.from(keyID)), ...field(Buffer.from(topic)), ...field(toBuffer(key))];
  for (const name of SIGNED_HEADERS) parts.push(...field(toBuffer(first(headers[name]))));
  parts.push(...field(toBuffer(value)));
  return Buffer.concat(parts);
}

function mac(secret, keyID, topic, key, value, headers) {
  return crypto.createHmac('sha256', secret).update(canonical(keyID, topic, key, value, headers)).digest();
}

// parseKey reads one key; errors name the id, never the secret.
function parseKey(id, secret) {
  id = id.trim();
  secret = secret.trim();
  if (!KEY_ID_RE.test(id)) throw new Error(`key id ${JSON.stringify(id)}: want 1 to 64 printable ASCII characters, no space`);
  let b;
  if (secret.startsWith('hex:')) {
    const h = secret.slice(4);
    if (!/^([0-9a-fA-F]{2})*$/.test(h)) throw new Error(`key ${JSON.stringify(id)}: secret: not hex after "hex:"`);
    b = Buffer.from(h, 'hex');
  } else {
    if (!BASE64_RE.test(secret)) throw new Error(`key ${JSON.stringify(id)}: secret: not base64 (nor "hex:" and hex digits)`);
    b = Buffer.from(secret, 'base64');
  }
  if (b.length < MIN_SECRET) throw new Error(`key ${JSON.stringify(id)}: secret is ${b.length} bytes, want at least ${MIN_SECRET}`);
  return { id, secret: b };
}

// parseKeys reads "id:secret,...".
function parseKeys(s) {
  const out = [];
  for (const item of (s || '').split(',').map((x) => x.trim()).filter(Boolean)) {
    const i = item.indexOf(':');
    if (i < 0) throw new Error(`key ${out.length + 1}: want id:secret`);
    out.push(parseKey(item.slice(0, i), item.slice(i + 1)));
  }
  return out;
}

// parseOwnedKeys reads "owner:id:secret,..." into owner -> keys.
function parseOwnedKeys(s) {
  const out = new Map();
  let n = 0;
  for (const item of (s || '').split(',').map((x) => x.trim()).filter(Boolean)) {
    n++;
    const i = item.indexOf(':');
    const j = i < 0 ? -1 : item.indexOf(':', i + 1);
    if (i <= 0 || j < 0) throw new Error(`item ${n}: want owner:id:secret`);
    const owner = item.slice(0, i).trim();
    const k = parseKey(item.slice(i + 1, j), item.slice(j + 1));
    out.set(owner, [...(out.get(owner) || []), k]);
  }
  return out;
}

// sign adds the signature headers of a record (topic, key, value, headers
// as a map of strings) signed with key {id, secret}.
function sign(key, rec) {
  const sig = mac(key.secret, key.id, rec.topic, rec.key, rec.value, rec.headers);
  return { ...rec, headers: { ...rec.headers, [HEADER_KEY_ID]: key.id, [HEADER_SIGNATURE]: sig.toString('hex') } };
}

// verify checks a record read from topic (kafkajs key, value and raw
// headers) against keys [{id, secret}]: it returns null when it verifies,
// 'unsigned' when it carries neither header, and otherwise why it does
// not (never the secret or the expected signature).
function verify(keys, topic, key, value, headers) {
  const rawID = headers[HEADER_KEY_ID];
  const rawSig = headers[HEADER_SIGNATURE];
  if (rawID === undefined && rawSig === undefined) return 'unsigned';
  if (rawID === undefined || rawSig === undefined || Array.isArray(rawID) || Array.isArray(rawSig)) {
    return `bad signature: want one ${HEADER_KEY_ID} and one ${HEADER_SIGNATURE} header`;
  }
  const id = toBuffer(rawID).toString();
  const sig = toBuffer(rawSig).toString();
  const k = keys.find((x) => x.id === id);
  if (!k) return `bad signature: key id ${JSON.stringify(id.slice(0, 64))} is not one this participant knows`;
  if (!/^[0-9a-f]{64}$/.test(sig)) return `bad signature: ${HEADER_SIGNATURE} is not 64 lower-case hex digits (key ${JSON.stringify(id)})`;
  const want = mac(k.secret, id, topic, key, value, headers);
  if (!crypto.timingSafeEqual(want, Buffer.from(sig, 'hex'))) {
    return `bad signature: the signature does not match the record (key ${JSON.stringify(id)}, topic ${JSON.stringify(topic)})`;
  }
  return null;
}

// Signing is a participant's part: verifyCommand throws (with the error
// class given) for a command that must not run; signReply signs a reply
// record when the participant has a key.
class Signing {
  constructor({ name, commandKeys = [], replyKey = null, allowUnsigned = false, invalid }) {
    Object.assign(this, { name, commandKeys, replyKey, allowUnsigned, invalid });
  }

  verifyCommand(topic, m) {
    if (this.commandKeys.length === 0) return;
    const why = verify(this.commandKeys, topic, m.key, m.value, m.headers || {});
    if (why === null || (why === 'unsigned' && this.allowUnsigned)) return;
    if (why === 'unsigned') {
      throw this.invalid(`invalid message: the record is not signed (no ${HEADER_KEY_ID} and ${HEADER_SIGNATURE} headers); participant ${this.name} requires signed commands (SAGAFLOW_SECURITY_ALLOW_UNSIGNED_COMMANDS takes unsigned ones during a migration)`);
    }
    throw this.invalid(`invalid message: ${why}`);
  }

  signReply(rec) {
    return this.replyKey ? sign(this.replyKey, rec) : rec;
  }
}

// signingFromEnv reads the SAGAFLOW_SECURITY_* variables for participant
// name; a bad value throws naming its variable.
function signingFromEnv(env, name, bool) {
  const read = (v, fn) => {
    try {
      return fn(env[v]);
    } catch (e) {
      throw new Error(`${v}: ${e.message}`);
    }
  };
  const commandKeys = read('SAGAFLOW_SECURITY_ORCHESTRATOR_KEYS', parseKeys);
  const own = read('SAGAFLOW_SECURITY_PARTICIPANT_KEYS', parseOwnedKeys).get(name) || [];
  return { commandKeys, replyKey: own[0] || null, allowUnsigned: bool(env, 'SAGAFLOW_SECURITY_ALLOW_UNSIGNED_COMMANDS', false) };
}

module.exports = { HEADER_KEY_ID, HEADER_SIGNATURE, SIGNED_HEADERS, canonical, sign, verify, parseKey, parseKeys, parseOwnedKeys, Signing, signingFromEnv };
