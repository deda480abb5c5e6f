'use strict';
// The relay: publishes the outbox's rows to Kafka in id order (acks=all;
// kafkajs' default partitioner, Java-compatible murmur2, on the key: the
// saga id) and deletes them once acknowledged. One relay per schema
// publishes, the holder of an advisory lock on its own connection; the
// others wait. A crash between publish and delete only re-publishes.
//
// A row Kafka refuses (as the Go relay, relay/publish.go: an unknown or
// illegal topic, a record too large, an invalid or corrupt record, a topic
// it may not write; or a row refused before sending: an illegal topic name,
// over MAX_MESSAGE_BYTES) does not block the rows after it: its attempts
// are counted, its last_error kept and it is retried after a backoff
// (RETRY_BACKOFF_MS doubling per attempt, at most MAX_RETRY_BACKOFF_MS),
// alone, while later rows go ahead; after maxAttempts it is parked (dead_at
// set) for an operator and never claimed again. A Kafka outage (no
// connection, no leader, timeouts: every other error) counts no attempt:
// nothing is marked, the relay backs off and retries as long as it takes.

const BATCH = 200;
const POLL_MS = 500; // fallback poll; commits in this process wake it at once
const STANDBY_MS = 1000;
// As the Go relay's defaults (relay.RetryBackoffDefault, MaxRetryBackoff,
// MaxMessageBytes).
const RETRY_BACKOFF_MS = 1000;
const MAX_RETRY_BACKOFF_MS = 60000;
const MAX_MESSAGE_BYTES = 64 << 20;
const MAX_ATTEMPTS_DEFAULT = 20;

// The Kafka error types that are the row's own fault: retrying it as it is
// cannot succeed (the Go relay marks these rows failed, then dead).
const PERMANENT = new Set([
  'UNKNOWN_TOPIC_OR_PARTITION', 'INVALID_TOPIC_EXCEPTION', 'TOPIC_AUTHORIZATION_FAILED',
  'MESSAGE_TOO_LARGE', 'RECORD_LIST_TOO_LARGE', 'INVALID_RECORD', 'CORRUPT_MESSAGE',
  'UNSUPPORTED_FOR_MESSAGE_FORMAT', 'POLICY_VIOLATION',
]);

// RowRefused: the relay does not hand the row to Kafka.
class RowRefused extends Error {}

// refusal returns why Kafka can never take row (as the Go relay's
// checkRow), or null.
function refusal(row) {
  const t = row.topic;
  if (t === '' || t.length > 249 || t === '.' || t === '..' || !/^[a-zA-Z0-9._-]+$/.test(t)) {
    return new RowRefused(`topic ${JSON.stringify(t)} is not a legal Kafka topic name ([a-zA-Z0-9._-], 1 to 249 characters, not "." or "..")`);
  }
  let size = Buffer.byteLength(row.key) + Buffer.byteLength(row.value);
  for (const [k, v] of Object.entries(row.headers || {})) size += Buffer.byteLength(k) + Buffer.byteLength(String(v));
  if (size > MAX_MESSAGE_BYTES) return new RowRefused(`record of ${size} bytes, limit ${MAX_MESSAGE_BYTES}`);
  return null;
}

// permanentCause returns the error in e's cause chain that makes a publish
// the row's own fault (kafkajs wraps the broker's answer in retry errors),
// or null: an outage.
function permanentCause(e) {
  for (let x = e, depth = 0; x && depth < 10; x = x.cause, depth++) {
    if (x instanceof RowRefused) return x;
    if (typeof x.type === 'string' && PERMANENT.has(x.type)) return x;
  }
  return null;
}

const describe = (e) => (typeof e.type === 'string' && !e.message.includes(e.type) ? `${e.type}: ${e.message}` : e.message);

class Relay {
  // metrics: lib/metrics.js participantMetrics (null: none).
  constructor({ pool, producer, store, log, maxAttempts = MAX_ATTEMPTS_DEFAULT, metrics = null }) {
    Object.assign(this, { pool, producer, store, log, maxAttempts, metrics });
    this.stopping = false;
    this.wakeUp = null;
    this.woken = false;
    this.onStop = null;
  }

  wake() {
    this.woken = true;
    if (this.wakeUp) this.wakeUp();
  }

  sleep(ms) {
    if (this.woken || this.stopping) {
      this.woken = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      const self = this;
      function done() {
        clearTimeout(timer);
        self.wakeUp = null;
        self.woken = false;
        resolve();
      }
      this.wakeUp = done;
    });
  }

  stop() {
    this.stopping = true;
    this.wake();
    if (this.onStop) this.onStop();
  }

  async run() {
    while (!this.stopping) {
      let c;
      try {
        c = await this.pool.connect();
        const lock = await c.query('SELECT pg_try_advisory_lock(hashtext($1)) AS ok', [`${this.store.schema}.relay`]);
        if (!lock.rows[0].ok) {
          c.release();
          c = null;
          await this.sleep(STANDBY_MS);
          continue;
        }
        await this.publishLoop(c);
        await c.query('SELECT pg_advisory_unlock(hashtext($1))', [`${this.store.schema}.relay`]);
        c.release();
        c = null;
      } catch (e) {
        this.log('warn', 'relay: publish failed; retrying', { error: e.message });
        if (c) c.release(true); // drop the connection, and the lock with it
        c = null;
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  }

  async publishLoop(c) {
    const { outbox } = this.store.t;
    let outages = 0;
    while (!this.stopping) {
      const r = await c.query(`SELECT id, topic, key, value, headers, attempts FROM ${outbox}
        WHERE dead_at IS NULL AND available_at <= now() ORDER BY id LIMIT ${BATCH}`);
      if (r.rowCount === 0) {
        await this.sleep(POLL_MS);
        continue;
      }
      const outage = await this.publishRows(c, r.rows);
      if (outage === null) {
        outages = 0;
        continue;
      }
      // Kafka did not answer: nothing marked; back off and try again.
      const ms = Math.min(500 * 2 ** outages, 30000);
      outages++;
      this.log('warn', 'relay: Kafka unavailable; retrying', { error: outage.message, retry_in_ms: ms });
      await this.pause(ms);
    }
  }

  // pause waits ms (not cut short by wake: commits during an outage must
  // not hammer Kafka), or less if the relay stops.
  pause(ms) {
    if (this.stopping) return Promise.resolve();
    return new Promise((resolve) => {
      const self = this;
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        self.onStop = null;
        resolve();
      }
      this.onStop = done;
    });
  }

  // send publishes rows with one sendBatch: one topicMessages entry per
  // topic, rows in id order, so one key's replies reach their partition in
  // order (maxInFlightRequests 1).
  async send(rows) {
    const byTopic = new Map();
    for (const row of rows) {
      if (!byTopic.has(row.topic)) byTopic.set(row.topic, []);
      byTopic.get(row.topic).push({ key: row.key, value: row.value, headers: row.headers });
    }
    await this.producer.sendBatch({
      acks: -1,
      topicMessages: [...byTopic].map(([topic, messages]) => ({ topic, messages })),
    });
  }

  // publishRows publishes the claimed rows in id order, rows never tried
  // before in runs of one sendBatch each, a row that failed before alone
  // (so a poison row cannot take its neighbours down twice); a run Kafka
  // refuses is sent again row by row, so the refusal lands on its row.
  // Published rows are deleted, refused ones marked (or parked). It returns
  // null, or the outage error that stopped it (the rest left untouched).
  async publishRows(c, rows) {
    const sent = [];
    const failed = [];
    let outage = null;
    const attempt = async (group) => {
      try {
        await this.send(group);
        sent.push(...group);
        return;
      } catch (e) {
        const cause = permanentCause(e);
        if (cause === null) {
          outage = e;
          return;
        }
        if (group.length === 1) {
          failed.push([group[0], cause]);
          return;
        }
      }
      for (const row of group) {
        if (outage !== null) return;
        await attempt([row]);
      }
    };
    let run = [];
    for (const row of rows) {
      if (outage !== null) break;
      const refused = refusal(row);
      if (refused !== null) {
        failed.push([row, refused]);
      } else if (row.attempts > 0) {
        if (run.length > 0) await attempt(run);
        run = [];
        if (outage === null) await attempt([row]);
      } else {
        run.push(row);
      }
    }
    if (run.length > 0 && outage === null) await attempt(run);

    const { outbox } = this.store.t;
    if (sent.length > 0) {
      await c.query(`DELETE FROM ${outbox} WHERE id = ANY($1::bigint[])`, [sent.map((x) => x.id)]);
      if (this.metrics) this.metrics.published.inc(this.metrics.p, sent.length);
    }
    for (const [row, cause] of failed) await this.markFailed(c, row, cause);
    if (this.metrics) {
      const untouched = rows.length - sent.length - failed.length;
      const errors = failed.length + (outage !== null ? untouched : 0);
      if (errors > 0) this.metrics.publishErrors.inc(this.metrics.p, errors);
    }
    return outage;
  }

  // markFailed counts a refused publish of row: it is due again after its
  // backoff, or parked dead once it has had maxAttempts.
  async markFailed(c, row, cause) {
    const error = `publish row ${row.id} to topic ${JSON.stringify(row.topic)}: ${describe(cause)}`.slice(0, 4096);
    const backoff = Math.min(RETRY_BACKOFF_MS * 2 ** row.attempts, MAX_RETRY_BACKOFF_MS);
    const r = await c.query(`UPDATE ${this.store.t.outbox} SET attempts = attempts + 1, last_error = $2,
      dead_at = CASE WHEN attempts + 1 >= $3 THEN now() END,
      available_at = now() + $4::float8 * interval '1 millisecond'
      WHERE id = $1 AND dead_at IS NULL RETURNING attempts, dead_at IS NOT NULL AS dead`, [row.id, error, this.maxAttempts, backoff]);
    if (r.rowCount === 0) return;
    const { attempts, dead } = r.rows[0];
    const attrs = { outbox_row_id: String(row.id), topic: row.topic, key: row.key, attempt: attempts, error };
    if (dead) {
      if (this.metrics) this.metrics.parked.inc(this.metrics.p);
      this.log('warn', 'relay: row parked dead after its last publish attempt; needs an operator', attrs);
    } else {
      this.log('warn', 'relay: publish of row refused; will retry', { ...attrs, retry_in_ms: backoff });
    }
  }
}

module.exports = { Relay, permanentCause, refusal, PERMANENT, MAX_ATTEMPTS_DEFAULT };
