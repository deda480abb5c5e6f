'use strict';
// Retention of the participant's own rows (as the Go binary's
// internal/retention for a participant's schema): every interval (the
// first cycle at start), inbox rows received longer ago than inboxAfter and
// barrier rows created longer ago than barrierAfter are deleted, batch by
// batch of at most batchSize rows, found by the BRIN indexes on their time
// columns. Rows a handler holds are skipped (SKIP LOCKED) and left for the
// next cycle; a forward still accepted is kept however old (its settling
// needs the row). barrierAfter is at least inboxAfter (checked at start): a
// redelivered command the inbox no longer dedupes must still find its
// barrier row, or a late forward would run after its compensation, or twice.
// The outbox needs none: the relay deletes its rows once Kafka has them
// (rows parked dead stay for an operator).

class Retention {
  // metrics: lib/metrics.js participantMetrics (or null).
  constructor({ pool, store, inboxAfter, barrierAfter, interval, batchSize, log, metrics = null }) {
    Object.assign(this, { pool, interval, batchSize, log, metrics });
    const { inbox, barrier } = store.t;
    this.jobs = [
      {
        table: `${store.schema}.inbox`, after: inboxAfter,
        sql: `DELETE FROM ${inbox} WHERE message_id IN (SELECT message_id FROM ${inbox}
          WHERE received_at < now() - $1::float8 * interval '1 millisecond' LIMIT $2 FOR UPDATE SKIP LOCKED)`,
      },
      {
        table: `${store.schema}.barrier`, after: barrierAfter,
        sql: `DELETE FROM ${barrier} WHERE (saga_id, step, action) IN (SELECT saga_id, step, action FROM ${barrier}
          WHERE created_at < now() - $1::float8 * interval '1 millisecond' AND outcome <> 'accepted'
          LIMIT $2 FOR UPDATE SKIP LOCKED)`,
      },
    ];
    this.timer = null;
    this.running = null;
    this.stopped = false;
  }

  // purgeOnce runs one cycle: each table batch by batch until a batch
  // deletes fewer than batchSize rows. It returns the rows deleted per
  // table; a failing table is logged and the others still purged.
  async purgeOnce() {
    const total = {};
    for (const j of this.jobs) {
      total[j.table] = 0;
      try {
        for (;;) {
          if (this.stopped) return total;
          const r = await this.pool.query(j.sql, [j.after, this.batchSize]);
          total[j.table] += r.rowCount;
          if (r.rowCount < this.batchSize) break;
        }
      } catch (e) {
        this.log('warn', 'retention: purge failed; retrying next cycle', { table: j.table, error: e.message });
      }
    }
    return total;
  }

  start() {
    const cycle = async () => {
      this.timer = null;
      this.running = this.purgeOnce();
      const n = await this.running;
      this.running = null;
      for (const [table, rows] of Object.entries(n)) {
        if (rows > 0) this.log('info', 'retention purged rows', { table, rows });
        if (rows > 0 && this.metrics) this.metrics.purged.inc({ ...this.metrics.p, table }, rows);
      }
      if (this.metrics) this.metrics.retentionCycles.inc(this.metrics.p);
      if (!this.stopped) this.timer = setTimeout(cycle, this.interval);
    };
    this.timer = setTimeout(cycle, 0);
  }

  // stop clears the timer and waits for a running cycle (its batch is one
  // short statement).
  async stop() {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (this.running) await this.running;
  }
}

module.exports = { Retention };
