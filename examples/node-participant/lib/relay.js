'use strict';
// The relay: publishes the outbox's rows to Kafka in id order (acks=all;
// kafkajs' default partitioner, Java-compatible murmur2, on the key: the
// saga id) and deletes them once acknowledged. One relay per schema
// publishes, the holder of an advisory lock on its own connection; the
// others wait. A crash between publish and delete only re-publishes.

const BATCH = 200;
const POLL_MS = 500; // fallback poll; commits in this process wake it at once
const STANDBY_MS = 1000;

class Relay {
  constructor({ pool, producer, store, log }) {
    Object.assign(this, { pool, producer, store, log });
    this.stopping = false;
    this.wakeUp = null;
    this.woken = false;
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
    while (!this.stopping) {
      const r = await c.query(`SELECT id, topic, key, value, headers FROM ${outbox} ORDER BY id LIMIT ${BATCH}`);
      if (r.rowCount === 0) {
        await this.sleep(POLL_MS);
        continue;
      }
      // One topicMessages entry per topic, rows in id order: one key's
      // replies reach their partition in order (maxInFlightRequests 1).
      const byTopic = new Map();
      for (const row of r.rows) {
        if (!byTopic.has(row.topic)) byTopic.set(row.topic, []);
        byTopic.get(row.topic).push({ key: row.key, value: row.value, headers: row.headers });
      }
      await this.producer.sendBatch({
        acks: -1,
        topicMessages: [...byTopic].map(([topic, messages]) => ({ topic, messages })),
      });
      await c.query(`DELETE FROM ${outbox} WHERE id = ANY($1::bigint[])`, [r.rows.map((x) => x.id)]);
    }
  }
}

module.exports = { Relay };
