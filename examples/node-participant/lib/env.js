'use strict';
// Parsing of the environment variables beyond the required ones: booleans
// and durations as the Go binary reads them (strconv.ParseBool,
// time.ParseDuration), the Kafka security settings (kafka.tls.*,
// kafka.sasl.* of the Go binary: SAGAFLOW_KAFKA_TLS_*, SAGAFLOW_KAFKA_SASL_*)
// and the retention settings (retention.*: SAGAFLOW_RETENTION_*). Every bad
// value is an error naming its variable, thrown at start.

const fs = require('fs');
const tls = require('tls');

const TRUE = ['1', 't', 'T', 'true', 'TRUE', 'True'];
const FALSE = ['0', 'f', 'F', 'false', 'FALSE', 'False'];

// bool reads env[name] as strconv.ParseBool does; unset or empty: def.
function bool(env, name, def) {
  const v = env[name];
  if (v === undefined || v === '') return def;
  if (TRUE.includes(v)) return true;
  if (FALSE.includes(v)) return false;
  throw new Error(`${name} is ${JSON.stringify(v)}: want true or false`);
}

// Milliseconds per unit of time.ParseDuration.
const UNITS = { ns: 1e-6, us: 1e-3, 'µs': 1e-3, 'μs': 1e-3, ms: 1, s: 1000, m: 60000, h: 3600000 };
const PART_RE = /^(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)/;

// parseDuration parses Go duration syntax ("168h", "1h30m", "1.5s",
// "250ms", "0") into milliseconds; anything else throws.
function parseDuration(s) {
  let rest = s;
  let sign = 1;
  if (rest.startsWith('-') || rest.startsWith('+')) {
    if (rest[0] === '-') sign = -1;
    rest = rest.slice(1);
  }
  if (rest === '0') return 0;
  if (rest === '') throw new Error('empty duration');
  let ms = 0;
  while (rest !== '') {
    const m = PART_RE.exec(rest);
    if (!m) {
      if (/^(\d+(?:\.\d*)?|\.\d+)$/.test(rest)) throw new Error(`missing unit in duration ${JSON.stringify(s)}`);
      throw new Error(`invalid duration ${JSON.stringify(s)}`);
    }
    ms += Number.parseFloat(m[1]) * UNITS[m[2]];
    rest = rest.slice(m[0].length);
  }
  return sign * ms;
}

// duration reads env[name] as a Go duration over 0 in milliseconds; unset
// or empty: def.
function duration(env, name, def) {
  const v = env[name];
  if (v === undefined || v === '') return def;
  let ms;
  try {
    ms = parseDuration(v);
  } catch (e) {
    throw new Error(`${name} is ${JSON.stringify(v)}: ${e.message}; want a duration such as 168h, 90m or 30s`);
  }
  if (!(ms > 0)) throw new Error(`${name} is ${JSON.stringify(v)}: want a duration over 0`);
  return ms;
}

// formatDuration writes ms back in Go style, for messages.
function formatDuration(ms) {
  if (ms < 1000) return `${ms}ms`;
  let s = ms / 1000;
  const h = Math.floor(s / 3600);
  s -= h * 3600;
  const m = Math.floor(s / 60);
  s -= m * 60;
  return `${h > 0 ? `${h}h` : ''}${h > 0 || m > 0 ? `${m}m` : ''}${Number(s.toFixed(3))}s`;
}

function positiveInt(env, name, def) {
  const v = env[name];
  if (v === undefined || v === '') return def;
  if (!/^\d+$/.test(v) || Number.parseInt(v, 10) < 1 || !Number.isSafeInteger(Number.parseInt(v, 10))) {
    throw new Error(`${name} is ${JSON.stringify(v)}: want a whole number over 0`);
  }
  return Number.parseInt(v, 10);
}

function readFile(name, path) {
  try {
    return fs.readFileSync(path);
  } catch (e) {
    throw new Error(`${name} ${JSON.stringify(path)}: cannot read it: ${e.message}`);
  }
}

const MECHANISMS = { plain: 'plain', 'scram-sha-256': 'scram-sha-256', 'scram-sha-512': 'scram-sha-512' };

// kafkaSecurity returns the ssl and sasl options of kafkajs' Kafka client
// (both undefined: plain TCP without authentication), reading and checking
// the files.
function kafkaSecurity(env) {
  const enabled = bool(env, 'SAGAFLOW_KAFKA_TLS_ENABLED', false);
  const insecure = bool(env, 'SAGAFLOW_KAFKA_TLS_INSECURE_SKIP_VERIFY', false);
  const files = {
    ca: ['SAGAFLOW_KAFKA_TLS_CA_FILE', env.SAGAFLOW_KAFKA_TLS_CA_FILE || ''],
    cert: ['SAGAFLOW_KAFKA_TLS_CERT_FILE', env.SAGAFLOW_KAFKA_TLS_CERT_FILE || ''],
    key: ['SAGAFLOW_KAFKA_TLS_KEY_FILE', env.SAGAFLOW_KAFKA_TLS_KEY_FILE || ''],
  };
  const serverName = env.SAGAFLOW_KAFKA_TLS_SERVER_NAME || '';
  let ssl;
  if (!enabled) {
    const set = [...Object.values(files).filter(([, v]) => v !== '').map(([k]) => k),
      ...(serverName !== '' ? ['SAGAFLOW_KAFKA_TLS_SERVER_NAME'] : []),
      ...(insecure ? ['SAGAFLOW_KAFKA_TLS_INSECURE_SKIP_VERIFY'] : [])];
    if (set.length > 0) throw new Error(`${set.join(', ')} set but SAGAFLOW_KAFKA_TLS_ENABLED is not true`);
  } else {
    if ((files.cert[1] === '') !== (files.key[1] === '')) {
      throw new Error('SAGAFLOW_KAFKA_TLS_CERT_FILE and SAGAFLOW_KAFKA_TLS_KEY_FILE go together: set both or neither');
    }
    ssl = { rejectUnauthorized: !insecure, minVersion: 'TLSv1.2' };
    if (serverName !== '') ssl.servername = serverName;
    if (files.ca[1] !== '') {
      const ca = readFile(...files.ca);
      if (!ca.toString('latin1').includes('-----BEGIN CERTIFICATE-----')) {
        throw new Error(`SAGAFLOW_KAFKA_TLS_CA_FILE ${JSON.stringify(files.ca[1])}: no PEM certificate in it`);
      }
      try {
        tls.createSecureContext({ ca });
      } catch (e) {
        throw new Error(`SAGAFLOW_KAFKA_TLS_CA_FILE ${JSON.stringify(files.ca[1])}: ${e.message}`);
      }
      ssl.ca = [ca];
    }
    if (files.cert[1] !== '') {
      const cert = readFile(...files.cert);
      const key = readFile(...files.key);
      try {
        tls.createSecureContext({ cert, key });
      } catch (e) {
        throw new Error(`SAGAFLOW_KAFKA_TLS_CERT_FILE ${JSON.stringify(files.cert[1])} and SAGAFLOW_KAFKA_TLS_KEY_FILE ${JSON.stringify(files.key[1])}: ${e.message}`);
      }
      Object.assign(ssl, { cert, key });
    }
  }

  const raw = env.SAGAFLOW_KAFKA_SASL_MECHANISM || '';
  const username = env.SAGAFLOW_KAFKA_SASL_USERNAME || '';
  const password = env.SAGAFLOW_KAFKA_SASL_PASSWORD || '';
  let sasl;
  if (raw === '') {
    if (username !== '' || password !== '') {
      throw new Error('SAGAFLOW_KAFKA_SASL_USERNAME or SAGAFLOW_KAFKA_SASL_PASSWORD set but SAGAFLOW_KAFKA_SASL_MECHANISM is empty; want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512');
    }
  } else {
    const mechanism = MECHANISMS[raw.toLowerCase()];
    if (mechanism === undefined) {
      throw new Error(`SAGAFLOW_KAFKA_SASL_MECHANISM is ${JSON.stringify(raw)}: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512`);
    }
    const missing = [['SAGAFLOW_KAFKA_SASL_USERNAME', username], ['SAGAFLOW_KAFKA_SASL_PASSWORD', password]].filter(([, v]) => v === '').map(([k]) => k);
    if (missing.length > 0) throw new Error(`SAGAFLOW_KAFKA_SASL_MECHANISM ${raw.toUpperCase()} needs ${missing.join(' and ')}`);
    // PLAIN sends the password as is: over plain TCP only when the operator
    // says so (development), as the Go binary's kafka.sasl.allow_plaintext.
    if (mechanism === 'plain' && !enabled && !bool(env, 'SAGAFLOW_KAFKA_SASL_ALLOW_PLAINTEXT', false)) {
      throw new Error('SAGAFLOW_KAFKA_SASL_MECHANISM PLAIN without SAGAFLOW_KAFKA_TLS_ENABLED=true would send the password in clear: enable TLS, use SCRAM-SHA-256/512, or set SAGAFLOW_KAFKA_SASL_ALLOW_PLAINTEXT=true (development only)');
    }
    sasl = { mechanism, username, password };
  }
  return { ssl, sasl };
}

// Defaults of the retention settings, as the Go binary's.
const RETENTION = { inboxAfter: 7 * 24 * 3600000, barrierAfter: 90 * 24 * 3600000, interval: 60000, batchSize: 1000 };
// The longest delay setTimeout takes (about 24.8 days).
const MAX_TIMER = 2 ** 31 - 1;

// retention returns the retention settings (durations in milliseconds).
function retention(env) {
  const r = {
    enabled: bool(env, 'SAGAFLOW_RETENTION_ENABLED', true),
    inboxAfter: duration(env, 'SAGAFLOW_RETENTION_INBOX_AFTER', RETENTION.inboxAfter),
    barrierAfter: duration(env, 'SAGAFLOW_RETENTION_BARRIER_AFTER', RETENTION.barrierAfter),
    interval: duration(env, 'SAGAFLOW_RETENTION_INTERVAL', RETENTION.interval),
    batchSize: positiveInt(env, 'SAGAFLOW_RETENTION_BATCH_SIZE', RETENTION.batchSize),
  };
  if (r.barrierAfter < r.inboxAfter) {
    throw new Error(`SAGAFLOW_RETENTION_BARRIER_AFTER (${formatDuration(r.barrierAfter)}) is shorter than SAGAFLOW_RETENTION_INBOX_AFTER (${formatDuration(r.inboxAfter)}): a redelivered command the inbox no longer dedupes must still find its barrier row`);
  }
  if (r.interval > MAX_TIMER) {
    throw new Error(`SAGAFLOW_RETENTION_INTERVAL is ${JSON.stringify(env.SAGAFLOW_RETENTION_INTERVAL)}: want at most ${formatDuration(MAX_TIMER)}`);
  }
  return r;
}

// metricsAddr reads SAGAFLOW_METRICS_ADDR, host:port as Go's net.Listen
// takes it ("127.0.0.1:9464", ":9464" for every interface, "[::1]:9464");
// unset or empty: null, no metrics served.
function metricsAddr(env) {
  const raw = env.SAGAFLOW_METRICS_ADDR;
  if (raw === undefined || raw === '') return null;
  const bad = (why) => new Error(`SAGAFLOW_METRICS_ADDR is ${JSON.stringify(raw)}: ${why}; want host:port such as 127.0.0.1:9464 or :9464`);
  const m = /^(?:\[([0-9A-Fa-f:.]+(?:%[\w.-]+)?)\]|([^:[\]\s]*)):(\d{1,5})$/.exec(raw);
  if (!m) throw bad(raw.includes(':') ? 'not host:port' : 'missing port');
  const host = m[1] !== undefined ? m[1] : m[2];
  if (m[1] === undefined && host !== '' && !/^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$/.test(host)) throw bad(`bad host ${JSON.stringify(host)}`);
  const port = Number.parseInt(m[3], 10);
  if (port > 65535) throw bad(`port ${port} is over 65535`);
  return { host, port, raw };
}

// The Go relay's default (relay.MaxAttemptsDefault).
const RELAY_MAX_ATTEMPTS = 20;

// relay returns the relay's settings.
function relay(env) {
  return { maxAttempts: positiveInt(env, 'SAGAFLOW_RELAY_MAX_ATTEMPTS', RELAY_MAX_ATTEMPTS) };
}

module.exports = { bool, parseDuration, duration, formatDuration, positiveInt, kafkaSecurity, retention, metricsAddr, relay };
