'use strict';
// Metrics in the Prometheus text exposition format (version 0.0.4), without
// a dependency: a small registry of counters and gauges, and an HTTP server
// for GET /metrics and GET /healthz (lib/env.js metricsAddr parses where).
// Names follow the Go side's (docs/operations.md) where there is a
// counterpart; every series carries the participant label.

const http = require('http');

const NAME_RE = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_RE = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

// Escapes of the text format: label values escape \, " and newline; HELP
// text escapes \ and newline.
const escapeLabel = (v) => String(v).replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
const escapeHelp = (v) => String(v).replace(/\\/g, '\\\\').replace(/\n/g, '\\n');

// formatValue writes a sample value as the format wants it (Go's float
// syntax; +Inf, -Inf, NaN).
function formatValue(v) {
  if (Number.isNaN(v)) return 'NaN';
  if (v === Infinity) return '+Inf';
  if (v === -Infinity) return '-Inf';
  return String(v);
}

class Family {
  constructor(type, name, help, labelNames) {
    if (!NAME_RE.test(name)) throw new Error(`metrics: bad metric name ${JSON.stringify(name)}`);
    for (const l of labelNames) {
      if (!LABEL_RE.test(l) || l.startsWith('__')) throw new Error(`metrics: bad label name ${JSON.stringify(l)} of ${name}`);
    }
    Object.assign(this, { type, name, help, labelNames });
    this.values = new Map(); // key: JSON of the label values in labelNames order
  }

  key(labels) {
    const missing = this.labelNames.filter((l) => labels[l] === undefined);
    const extra = Object.keys(labels).filter((l) => !this.labelNames.includes(l));
    if (missing.length > 0 || extra.length > 0) {
      throw new Error(`metrics: ${this.name} wants labels ${this.labelNames.join(', ')}; got ${Object.keys(labels).join(', ')}`);
    }
    return JSON.stringify(this.labelNames.map((l) => String(labels[l])));
  }

  // lines writes the family: HELP, TYPE, then one sample per label set.
  lines(values = this.values) {
    const out = [`# HELP ${this.name} ${escapeHelp(this.help)}`, `# TYPE ${this.name} ${this.type}`];
    for (const [k, v] of values) {
      const lv = JSON.parse(k);
      const labels = this.labelNames.map((l, i) => `${l}="${escapeLabel(lv[i])}"`).join(',');
      out.push(`${this.name}${labels ? `{${labels}}` : ''} ${formatValue(v)}`);
    }
    return out;
  }
}

class Counter extends Family {
  constructor(name, help, labelNames) {
    super('counter', name, help, labelNames);
  }

  inc(labels = {}, n = 1) {
    if (!(n >= 0)) throw new Error(`metrics: ${this.name} cannot go down (${n})`);
    const k = this.key(labels);
    this.values.set(k, (this.values.get(k) || 0) + n);
  }

  // init makes the series exist at 0 (so that rate() sees its first rise).
  init(labels = {}) {
    const k = this.key(labels);
    if (!this.values.has(k)) this.values.set(k, 0);
  }
}

class Gauge extends Family {
  // collect, if given, is called at each scrape and answers the samples:
  // [{labels, value}]; if it throws, the family is written without samples.
  constructor(name, help, labelNames, collect) {
    super('gauge', name, help, labelNames);
    this.collect = collect;
  }

  set(labels, v) {
    this.values.set(this.key(labels), v);
  }
}

class Registry {
  constructor() {
    this.families = [];
  }

  add(f) {
    if (this.families.some((g) => g.name === f.name)) throw new Error(`metrics: ${f.name} registered twice`);
    this.families.push(f);
    return f;
  }

  counter(name, help, labelNames = []) {
    return this.add(new Counter(name, help, labelNames));
  }

  gauge(name, help, labelNames = [], collect = null) {
    return this.add(new Gauge(name, help, labelNames, collect));
  }

  // text renders every family; a collector that fails is reported through
  // onError (before anything is rendered, so a counter it increments shows
  // in this scrape) and its family written without samples.
  async text(onError) {
    const collected = new Map();
    for (const f of this.families) {
      if (!f.collect) continue;
      const values = new Map();
      try {
        for (const s of await f.collect()) values.set(f.key(s.labels), s.value);
      } catch (e) {
        values.clear();
        if (onError) onError(f, e);
      }
      collected.set(f, values);
    }
    const out = [];
    for (const f of this.families) out.push(...f.lines(collected.get(f) || f.values));
    return `${out.join('\n')}\n`;
  }
}

// withTimeout rejects if p does not settle within ms.
function withTimeout(p, ms, what) {
  let timer;
  const t = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms}ms`)), ms);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

// STAT_TIMEOUT_MS bounds the Postgres read of the outbox gauges at a scrape.
const STAT_TIMEOUT_MS = 2000;

// participantMetrics is the participant's registry: the counters its parts
// increment and the outbox gauges, read from Postgres at each scrape.
function participantMetrics({ name, pool, store, log }) {
  const reg = new Registry();
  const p = { participant: name };
  const m = {
    registry: reg,
    commands: reg.counter('sagaflow_participant_commands_total',
      'Commands handled (their reply written to the outbox), by the outcome answered.', ['participant', 'outcome']),
    duplicates: reg.counter('sagaflow_inbox_duplicates_total',
      'Commands skipped because the inbox had their message id (redeliveries).', ['participant']),
    deadLettered: reg.counter('sagaflow_dlq_messages_total',
      'Records sent to the dead-letter topic, by reason class: invalid_message (does not decode or validate) or database_refused (Postgres refused its effects).',
      ['participant', 'reason']),
    dlqShortened: reg.counter('sagaflow_dlq_shortened_total',
      'Dead letters sent as a shortened record (first 1 KiB of key and value, headers cut): too large, or refused by the broker as they were.', ['participant']),
    dlqLost: reg.counter('sagaflow_dlq_lost_total',
      'Dead letters the broker refused even shortened: the command was skipped and only a log line keeps it.', ['participant']),
    published: reg.counter('sagaflow_relay_published_total', 'Outbox rows the relay published (acknowledged by Kafka).', ['participant']),
    publishErrors: reg.counter('sagaflow_relay_publish_errors_total',
      'Outbox rows whose publish failed: refused by Kafka (counted toward parking) or not sent during a Kafka outage.', ['participant']),
    parked: reg.counter('sagaflow_relay_parked_total',
      'Outbox rows parked dead (dead_at set) after their last publish attempt; they need an operator.', ['participant']),
    purged: reg.counter('sagaflow_retention_purged_total', 'Rows deleted by retention, by table.', ['participant', 'table']),
    retentionCycles: reg.counter('sagaflow_retention_cycles_total', 'Retention cycles finished (each purges every table it can).', ['participant']),
    scrapeErrors: reg.counter('sagaflow_node_scrape_errors_total',
      'Scrapes at which a gauge could not be read (its samples are left out of that scrape).', ['participant']),
  };
  for (const outcome of ['success', 'failure', 'retry']) m.commands.init({ ...p, outcome });
  for (const reason of ['invalid_message', 'database_refused']) m.deadLettered.init({ ...p, reason });
  for (const c of [m.duplicates, m.dlqShortened, m.dlqLost, m.published, m.publishErrors, m.parked, m.retentionCycles, m.scrapeErrors]) c.init(p);
  for (const table of ['inbox', 'barrier']) m.purged.init({ ...p, table: `${store.schema}.${table}` });

  // Both outbox gauges from one read per scrape (started by m.scrape).
  let stats = null;
  const readStats = () => withTimeout(pool.query({
    text: `SELECT count(*) FILTER (WHERE dead_at IS NULL) AS unsent, count(*) FILTER (WHERE dead_at IS NOT NULL) AS dead FROM ${store.t.outbox}`,
    query_timeout: STAT_TIMEOUT_MS,
  }), STAT_TIMEOUT_MS, 'outbox gauges').then((r) => ({ unsent: Number(r.rows[0].unsent), dead: Number(r.rows[0].dead) }));
  reg.gauge('sagaflow_outbox_pending', 'Outbox rows not yet published and not parked dead (read at the scrape).', ['participant'],
    async () => [{ labels: p, value: (await stats).unsent }]);
  reg.gauge('sagaflow_outbox_dead', 'Outbox rows parked dead, waiting for an operator (read at the scrape).', ['participant'],
    async () => [{ labels: p, value: (await stats).dead }]);

  m.scrape = () => {
    stats = readStats();
    stats.catch(() => {}); // awaited by the gauges
    let failed = false;
    return reg.text((f, e) => {
      if (failed) return; // one read failed: one error
      failed = true;
      m.scrapeErrors.inc(p);
      if (log) log('warn', 'metrics: outbox gauges not read; left out of the scrape', { error: e.message });
    });
  };
  m.p = p;
  return m;
}

// serve starts the HTTP server on {host, port} (lib/env.js metricsAddr):
// GET /metrics and GET /healthz. It resolves once listening and rejects,
// naming the variable, if it cannot listen.
function serve(metrics, { host, port, raw }, log) {
  const server = http.createServer((req, res) => {
    const path = (req.url || '').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { Allow: 'GET, HEAD', 'Content-Type': 'text/plain; charset=utf-8' });
      res.end('method not allowed\n');
      return;
    }
    if (path === '/healthz') {
      res.writeHead(200, { 'Content-Type': 'text/plain; charset=utf-8' });
      res.end('ok');
      return;
    }
    if (path !== '/metrics') {
      res.writeHead(404, { 'Content-Type': 'text/plain; charset=utf-8' });
      res.end('not found\n');
      return;
    }
    metrics.scrape().then((body) => {
      res.writeHead(200, { 'Content-Type': 'text/plain; version=0.0.4; charset=utf-8' });
      res.end(req.method === 'HEAD' ? undefined : body);
    }, (e) => {
      res.writeHead(500, { 'Content-Type': 'text/plain; charset=utf-8' });
      res.end(`scrape failed: ${e.message}\n`);
    });
  });
  server.keepAliveTimeout = 5000;
  return new Promise((resolve, reject) => {
    server.once('error', (e) => reject(new Error(`SAGAFLOW_METRICS_ADDR ${JSON.stringify(raw)}: cannot listen: ${e.message}`)));
    server.listen({ host: host || undefined, port }, () => {
      server.removeAllListeners('error');
      server.on('error', (e) => log('warn', 'metrics server failed', { error: e.message }));
      const a = server.address();
      log('info', 'metrics served', { addr: typeof a === 'string' ? a : `${a.address}:${a.port}`, path: '/metrics' });
      resolve(server);
    });
  });
}

// close stops the server, closing idle keep-alive connections.
function close(server) {
  return new Promise((resolve) => {
    server.close(() => resolve());
    if (server.closeIdleConnections) server.closeIdleConnections();
  });
}

module.exports = { Registry, Counter, Gauge, participantMetrics, serve, close, escapeLabel, escapeHelp };
