'use strict';
// A sagaflow participant in Node.js: the wire contract in its own Postgres
// schema (barrier, inbox, outbox, relay, dead letters, the query action) and
// the conformance step. See README.md.
//
//   SAGAFLOW_KAFKA_BROKERS   comma-separated bootstrap brokers (required)
//   SAGAFLOW_DATABASE_URL    Postgres URL (required)
//   SAGAFLOW_PARTICIPANT     its name: consumes <name>.commands (required)
//   SAGAFLOW_REPLY_TOPIC     the reply topics it answers on, comma-separated
//                            (default saga.replies)
//   SAGAFLOW_SCHEMA          its schema (default: the name, as an identifier)
//   SAGAFLOW_KAFKA_PARTITIONS partitions of the topics it creates (default 4)
//
// Secured Kafka (the Go binary's kafka.tls.* and kafka.sasl.*), for every
// client (consumer, relay producer, topic creation):
//   SAGAFLOW_KAFKA_TLS_ENABLED  true: connect over TLS (default false)
//   SAGAFLOW_KAFKA_TLS_CA_FILE  PEM authorities of the brokers' certificates
//                               (default: Node's bundled ones)
//   SAGAFLOW_KAFKA_TLS_CERT_FILE, SAGAFLOW_KAFKA_TLS_KEY_FILE
//                               client certificate and key (PEM), both or neither
//   SAGAFLOW_KAFKA_TLS_SERVER_NAME  name checked against the brokers'
//                               certificates (default: each broker's host)
//   SAGAFLOW_KAFKA_TLS_INSECURE_SKIP_VERIFY  true: accept any certificate
//                               (development only; default false)
//   SAGAFLOW_KAFKA_SASL_MECHANISM  PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
//                               (any case; default none)
//   SAGAFLOW_KAFKA_SASL_USERNAME, SAGAFLOW_KAFKA_SASL_PASSWORD
//                               required with a mechanism; never logged
//
// Retention of its inbox and barrier rows (the Go binary's retention.*):
//   SAGAFLOW_RETENTION_ENABLED  false: never purge (default true)
//   SAGAFLOW_RETENTION_INBOX_AFTER  inbox rows older than this are deleted
//                               (Go duration: 168h, 90m, 30s; default 168h)
//   SAGAFLOW_RETENTION_BARRIER_AFTER  barrier rows older than this are
//                               deleted (default 2160h); at least the inbox's
//   SAGAFLOW_RETENTION_INTERVAL time between purges (default 1m)
//   SAGAFLOW_RETENTION_BATCH_SIZE  rows one DELETE removes (default 1000)
//
// The relay (lib/relay.js):
//   SAGAFLOW_RELAY_MAX_ATTEMPTS publishes Kafka refuses before an outbox row
//                               is parked dead (dead_at set; default 20)
//
// Metrics (lib/metrics.js):
//   SAGAFLOW_METRICS_ADDR       host:port to serve GET /metrics (Prometheus
//                               text format) and GET /healthz on, such as
//                               127.0.0.1:9464 (default: not served)
//
// Record signatures (lib/sign.js; docs/DESIGN.md, "Signed records"):
//   SAGAFLOW_SECURITY_ORCHESTRATOR_KEYS  "id:secret,...": verify commands
//   SAGAFLOW_SECURITY_PARTICIPANT_KEYS   "participant:id:secret,...": its
//                               entry signs its replies
//   SAGAFLOW_SECURITY_ALLOW_UNSIGNED_COMMANDS  true: take unsigned commands
//                               during a migration window (default false)
//
// A bad value of any of these (or of SAGAFLOW_KAFKA_PARTITIONS) stops it at
// start, with the variable named.

const { Pool } = require('pg');
const { Store } = require('./lib/store');
const { Participant } = require('./lib/participant');
const { conformanceStep, finishStep } = require('./lib/conformance');
const { Retention } = require('./lib/retention');
const { kafkaSecurity, retention, positiveInt, metricsAddr, relay, bool } = require('./lib/env');
const { Signing, signingFromEnv } = require('./lib/sign');
const metricsHTTP = require('./lib/metrics');
const { TOPIC_RE, InvalidMessage } = require('./lib/wire');

function log(level, msg, attrs = {}) {
  process.stderr.write(`${JSON.stringify({ time: new Date().toISOString(), level, msg, ...attrs })}\n`);
}

function config(env) {
  const missing = ['SAGAFLOW_KAFKA_BROKERS', 'SAGAFLOW_DATABASE_URL', 'SAGAFLOW_PARTICIPANT'].filter((k) => !env[k]);
  if (missing.length > 0) throw new Error(`${missing.join(', ')} not set`);
  const name = env.SAGAFLOW_PARTICIPANT;
  if (!TOPIC_RE.test(`${name}.commands.dlq`)) throw new Error(`SAGAFLOW_PARTICIPANT ${JSON.stringify(name)} does not make legal topic names`);
  const replyTopics = (env.SAGAFLOW_REPLY_TOPIC || 'saga.replies').split(',').map((s) => s.trim()).filter(Boolean);
  const bad = replyTopics.find((t) => !TOPIC_RE.test(t));
  if (bad !== undefined) throw new Error(`SAGAFLOW_REPLY_TOPIC: ${JSON.stringify(bad)} is not a legal topic name`);
  let schema = env.SAGAFLOW_SCHEMA || name.toLowerCase().replace(/[^a-z0-9_]/g, '_');
  if (!/^[a-z_]/.test(schema)) schema = `p_${schema}`;
  return {
    name, replyTopics, schema: schema.slice(0, 63),
    brokers: env.SAGAFLOW_KAFKA_BROKERS.split(',').map((s) => s.trim()).filter(Boolean),
    databaseURL: env.SAGAFLOW_DATABASE_URL,
    partitions: positiveInt(env, 'SAGAFLOW_KAFKA_PARTITIONS', 4),
    ...kafkaSecurity(env),
    retention: retention(env),
    relay: relay(env),
    metricsAddr: metricsAddr(env),
    signing: signingFromEnv(env, name, bool),
  };
}

async function main() {
  const cfg = config(process.env);
  const pool = new Pool({ connectionString: cfg.databaseURL, max: 4 });
  pool.on('error', (e) => log('warn', 'idle Postgres connection failed', { error: e.message }));
  const store = new Store(pool, cfg.schema);
  const metrics = metricsHTTP.participantMetrics({ name: cfg.name, pool, store, log });
  // The finish step settles accepted steps through the participant (made
  // just below; called only once it runs).
  const settle = (c, ref, res) => participant.settle(c, ref, res);
  const participant = new Participant({
    name: cfg.name, brokers: cfg.brokers, ssl: cfg.ssl, sasl: cfg.sasl, pool, store, replyTopics: cfg.replyTopics,
    partitions: cfg.partitions, steps: [conformanceStep(store), finishStep(store, settle)], log, relayMaxAttempts: cfg.relay.maxAttempts, metrics,
    signing: new Signing({ name: cfg.name, ...cfg.signing, invalid: (why) => new InvalidMessage(why) }),
  });
  if (cfg.signing.commandKeys.length === 0) log('warn', 'commands are not verified: set SAGAFLOW_SECURITY_ORCHESTRATOR_KEYS');
  if (!cfg.signing.replyKey) log('warn', 'replies are unsigned: set SAGAFLOW_SECURITY_PARTICIPANT_KEYS');
  const purger = cfg.retention.enabled ? new Retention({ pool, store, ...cfg.retention, log, metrics }) : null;
  // Served from the start (the outbox gauges count scrape errors until the
  // schema exists); failing to listen stops the process.
  const server = cfg.metricsAddr ? await metricsHTTP.serve(metrics, cfg.metricsAddr, log) : null;
  let stopping = false;
  const stop = async (signal) => {
    if (stopping) return;
    stopping = true;
    log('info', 'stopping', { signal });
    setTimeout(() => process.exit(1), 10000).unref();
    if (server) await metricsHTTP.close(server);
    if (purger) await purger.stop();
    await participant.stop();
    await pool.end();
    process.exit(0);
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  await participant.start();
  // After start: the schema (and the indexes the purge uses) exists.
  if (purger && !stopping) {
    purger.start();
    log('info', 'retention running', { inbox_after_ms: cfg.retention.inboxAfter, barrier_after_ms: cfg.retention.barrierAfter, interval_ms: cfg.retention.interval });
  } else if (!purger) {
    log('info', 'retention off (SAGAFLOW_RETENTION_ENABLED=false)');
  }
}

main().catch((e) => {
  log('error', 'participant failed', { error: e.stack || e.message });
  process.exit(1);
});
