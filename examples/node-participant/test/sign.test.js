'use strict';
// node --test test/: the record signatures of lib/sign.js against the worked
// example the Go tests check too (message/testdata/signature-v1.json).

const test = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const { sign, verify, parseKeys, parseOwnedKeys, Signing, HEADER_SIGNATURE, HEADER_KEY_ID, SIGNED_HEADERS } = require('../lib/sign');

const vector = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', '..', 'message', 'testdata', 'signature-v1.json'), 'utf8'));
const key = { id: vector.key_id, secret: Buffer.from(vector.secret_base64, 'base64') };
const record = { topic: vector.topic, key: vector.key, value: vector.value, headers: vector.headers };

// kafkajs hands headers over as Buffers.
const asRead = (headers) => Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, Buffer.from(v)]));

test('signs the worked example as the Go signer does', () => {
  const signed = sign(key, record);
  assert.strictEqual(signed.headers[HEADER_SIGNATURE], vector.signature);
  assert.strictEqual(signed.headers[HEADER_KEY_ID], vector.key_id);
  assert.strictEqual(verify([key], vector.topic, Buffer.from(vector.key), Buffer.from(vector.value), asRead(signed.headers)), null);
});

test('refuses every changed part, an unknown key, and tells unsigned apart', () => {
  const signed = asRead(sign(key, record).headers);
  const v = (topic, k, value, headers) => verify([key], topic, Buffer.from(k), Buffer.from(value), headers);
  assert.match(v('payment.commands', vector.key, vector.value, signed), /does not match/);
  assert.match(v(vector.topic, 'order-43', vector.value, signed), /does not match/);
  assert.match(v(vector.topic, vector.key, `${vector.value} `, signed), /does not match/);
  for (const h of SIGNED_HEADERS) {
    assert.match(v(vector.topic, vector.key, vector.value, { ...signed, [h]: Buffer.from('x') }), /does not match/, h);
  }
  assert.match(v(vector.topic, vector.key, vector.value, { ...signed, [HEADER_KEY_ID]: Buffer.from('nobody') }), /not one this participant knows/);
  assert.match(v(vector.topic, vector.key, vector.value, { ...signed, [HEADER_SIGNATURE]: [signed[HEADER_SIGNATURE], signed[HEADER_SIGNATURE]] }), /want one/);
  assert.strictEqual(v(vector.topic, vector.key, vector.value, asRead(vector.headers)), 'unsigned');
  assert.strictEqual(v(vector.topic, vector.key, vector.value, { ...signed, 'x-extra': Buffer.from('1') }), null);
});

test('a participant requiring signatures refuses unsigned and badly signed commands, takes signed ones', () => {
  const invalid = (why) => new Error(why);
  const s = new Signing({ name: 'inventory', commandKeys: [key], invalid });
  const m = (headers, value = vector.value) => ({ key: Buffer.from(vector.key), value: Buffer.from(value), headers });
  const signed = asRead(sign(key, record).headers);
  s.verifyCommand(vector.topic, m(signed));
  assert.throws(() => s.verifyCommand(vector.topic, m(asRead(vector.headers))), /requires signed commands/);
  assert.throws(() => s.verifyCommand(vector.topic, m(signed, `${vector.value} `)), /does not match/);
  const migrating = new Signing({ name: 'inventory', commandKeys: [key], allowUnsigned: true, invalid });
  migrating.verifyCommand(vector.topic, m(asRead(vector.headers)));
  assert.throws(() => migrating.verifyCommand(vector.topic, m(signed, `${vector.value} `)), /does not match/);
});

test('parses keys as the Go binary does, never quoting a secret', () => {
  const ks = parseKeys(`old:hex:${'ab'.repeat(32)}, new:${vector.secret_base64}`);
  assert.deepStrictEqual(ks.map((k) => k.id), ['old', 'new']);
  assert.strictEqual(ks[1].secret[31], 31);
  const owned = parseOwnedKeys(`inventory:inv-1:${vector.secret_base64},payment:pay-1:hex:${'01'.repeat(32)}`);
  assert.strictEqual(owned.get('inventory')[0].id, 'inv-1');
  for (const bad of ['k1', 'k1:c2hvcnQ=', 'k1:!!!']) {
    assert.throws(() => parseKeys(bad), (e) => !e.message.includes('c2hvcnQ'));
  }
});
