'use strict';
// The participant's own schema: the barrier (one row per saga, step and
// action ever decided), the inbox (message ids consumed), the outbox
// (replies waiting for the relay; rows Kafka keeps refusing parked dead),
// and the barrier protocol that runs a command's handler inside the
// transaction of its inbox row, barrier row and reply (docs/DESIGN.md,
// "Participant duties").

const { InvalidMessage, cut } = require('./wire');

// InvalidPayload is what a handler throws for a payload that does not fit:
// a definite "no", recorded as failure "invalid_payload: ...".
class InvalidPayload extends Error {}

const REASON_COMPENSATED = 'compensated';
const REASON_EMPTY = 'empty';
const REASON_CLOSED_BY_QUERY = 'closed_by_query';
const REASON_CANCELLED = 'cancelled';
const REASON_HELD = 'held: the forward was answered accepted and is not settled yet';

// NotAccepted is what settle throws for a step that is not accepted (any
// more): settled already, cancelled by its compensation, or never accepted.
class NotAccepted extends Error {}

const ident = (s) => `"${s.replace(/"/g, '""')}"`;

class Store {
  constructor(pool, schema) {
    this.pool = pool;
    this.schema = schema;
    const q = (t) => `${ident(schema)}.${ident(t)}`;
    this.t = { barrier: q('barrier'), inbox: q('inbox'), outbox: q('outbox') };
    this.q = q;
  }

  // migrate creates the schema and its tables (and extra, the business
  // tables' DDL) under an advisory lock, so that replicas starting together
  // do not race.
  async migrate(extra = []) {
    const { t } = this;
    await this.tx(async (c) => {
      await c.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`${this.schema}.migrate`]);
      await c.query(`CREATE SCHEMA IF NOT EXISTS ${ident(this.schema)}`);
      await c.query(`CREATE TABLE IF NOT EXISTS ${t.barrier} (
        saga_id uuid NOT NULL, step text NOT NULL,
        action text NOT NULL CHECK (action IN ('forward', 'compensate')),
        outcome text NOT NULL CHECK (outcome IN ('pending', 'success', 'failure')),
        reason text NOT NULL DEFAULT '', payload jsonb, closed boolean NOT NULL DEFAULT false,
        created_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (saga_id, step, action))`);
      await c.query(`CREATE TABLE IF NOT EXISTS ${t.inbox} (
        message_id uuid PRIMARY KEY, received_at timestamptz NOT NULL DEFAULT now())`);
      await c.query(`CREATE TABLE IF NOT EXISTS ${t.outbox} (
        id bigserial PRIMARY KEY, topic text NOT NULL, key text NOT NULL, value text NOT NULL,
        headers jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`);
      // The relay's bookkeeping of rows Kafka refuses (lib/relay.js), added
      // to outboxes made before it: publish attempts refused, the last
      // refusal, when the row is due again and when it was parked dead.
      await c.query(`ALTER TABLE ${t.outbox} ADD COLUMN IF NOT EXISTS attempts integer NOT NULL DEFAULT 0,
        ADD COLUMN IF NOT EXISTS last_error text,
        ADD COLUMN IF NOT EXISTS available_at timestamptz NOT NULL DEFAULT now(),
        ADD COLUMN IF NOT EXISTS dead_at timestamptz`);
      // Retention finds old rows by time: both tables are appended in time
      // order, so BRIN indexes on their time columns serve (as the Go side's).
      await c.query(`CREATE INDEX IF NOT EXISTS barrier_created_brin ON ${t.barrier} USING brin (created_at)`);
      await c.query(`CREATE INDEX IF NOT EXISTS inbox_received_brin ON ${t.inbox} USING brin (received_at)`);
      // Answer later (the Go side's barrier migration 011): a forward may
      // stay 'accepted' until settled, with the command its final reply
      // answers (the latest copy) and whether a compensation may cancel it.
      // Only once: ALTER TABLE locks the whole barrier, and would wait at
      // every start for any transaction holding one of its rows.
      const answerLater = await c.query(`SELECT 1 FROM information_schema.columns
        WHERE table_schema = $1 AND table_name = 'barrier' AND column_name = 'cancellable'`, [this.schema]);
      if (answerLater.rowCount === 0) {
        await c.query(`ALTER TABLE ${t.barrier} DROP CONSTRAINT IF EXISTS barrier_outcome_check`);
        await c.query(`ALTER TABLE ${t.barrier} ADD CONSTRAINT barrier_outcome_check
          CHECK (outcome IN ('pending', 'success', 'failure', 'accepted'))`);
        await c.query(`ALTER TABLE ${t.barrier} ADD COLUMN reply_to text, ADD COLUMN command_id uuid,
          ADD COLUMN attempt integer, ADD COLUMN cancellable boolean NOT NULL DEFAULT false`);
      }
      for (const sql of extra) await c.query(sql);
    });
  }

  // tx runs fn(client) in a transaction (READ COMMITTED), committing if it
  // returns and rolling back if it throws.
  async tx(fn) {
    const c = await this.pool.connect();
    try {
      await c.query('BEGIN');
      const out = await fn(c);
      await c.query('COMMIT');
      return out;
    } catch (e) {
      await c.query('ROLLBACK').catch(() => {});
      throw e;
    } finally {
      c.release();
    }
  }

  // claimMessage inserts the record's message id in the inbox; false: it was
  // consumed before (a redelivery), do nothing.
  async claimMessage(c, messageID) {
    const r = await c.query(`INSERT INTO ${this.t.inbox} (message_id) VALUES ($1) ON CONFLICT DO NOTHING`, [messageID]);
    return r.rowCount === 1;
  }

  async enqueue(c, rec) {
    await c.query(`INSERT INTO ${this.t.outbox} (topic, key, value, headers) VALUES ($1, $2, $3, $4)`,
      [rec.topic, rec.key, rec.value, JSON.stringify(rec.headers)]);
  }

  async read(c, cmd, action) {
    const r = await c.query(`SELECT outcome, reason, payload::text AS payload, closed, cancellable FROM ${this.t.barrier}
      WHERE saga_id = $1 AND step = $2 AND action = $3`, [cmd.saga_id, cmd.step, action]);
    if (r.rowCount === 0) return null;
    const row = r.rows[0];
    if (row.outcome === 'pending') throw new Error(`barrier row ${cmd.saga_id} ${cmd.step} ${action} is pending in this transaction`);
    return {
      outcome: row.outcome, reason: row.reason, payload: row.payload === null ? null : JSON.parse(row.payload),
      closed: row.closed, cancellable: row.cancellable,
    };
  }

  async insertPending(c, cmd, action) {
    const r = await c.query(`INSERT INTO ${this.t.barrier} (saga_id, step, action, outcome) VALUES ($1, $2, $3, 'pending')
      ON CONFLICT DO NOTHING`, [cmd.saga_id, cmd.step, action]);
    return r.rowCount === 1;
  }

  // closeForward records the forward as closed unless it has a row; true if
  // it closed it (nothing was recorded for the forward).
  async closeForward(c, cmd, reason) {
    const r = await c.query(`INSERT INTO ${this.t.barrier} (saga_id, step, action, outcome, reason, closed)
      VALUES ($1, $2, 'forward', 'failure', $3, true) ON CONFLICT DO NOTHING`, [cmd.saga_id, cmd.step, reason]);
    return r.rowCount === 1;
  }

  async record(c, cmd, action, res) {
    const payload = res.payload === null || res.payload === undefined ? null : JSON.stringify(res.payload);
    const r = await c.query(`UPDATE ${this.t.barrier} SET outcome = $4, reason = $5, payload = $6::text::jsonb
      WHERE saga_id = $1 AND step = $2 AND action = $3 RETURNING payload::text AS payload`,
    [cmd.saga_id, cmd.step, action, res.outcome, res.reason || '', payload]);
    const stored = r.rows[0].payload; // as Postgres stores it, like every copy's answer
    return { outcome: res.outcome, reason: res.reason || '', payload: stored === null ? null : JSON.parse(stored) };
  }

  // runHandler runs fn in a savepoint: kept for a success, rolled back
  // otherwise. A thrown InvalidPayload becomes a failure.
  async runHandler(c, fn, cmd) {
    await c.query('SAVEPOINT handler');
    let res;
    try {
      res = await fn(c, cmd);
    } catch (e) {
      if (!(e instanceof InvalidPayload)) throw e;
      res = { outcome: 'failure', reason: cut(`invalid_payload: ${e.message}`, 1024), invalidPayload: true };
    }
    if (!['success', 'failure', 'retry', 'accepted'].includes(res.outcome)) throw new Error(`handler of ${cmd.step} answered outcome ${res.outcome}`);
    if (res.outcome === 'accepted' && cmd.action !== 'forward') throw new Error(`handler of ${cmd.step} ${cmd.action} answered accepted: only a forward may`);
    // An accepted forward keeps its writes too: the work it took on.
    await c.query(res.outcome === 'success' || res.outcome === 'accepted' ? 'RELEASE SAVEPOINT handler' : 'ROLLBACK TO SAVEPOINT handler');
    return res;
  }

  // execute runs cmd behind the barrier (handlers: {forward, compensate} of
  // its step) and returns {outcome, reason, payload} to answer with.
  async execute(c, cmd, handlers) {
    if (!handlers) throw new InvalidMessage(`invalid message: unknown step ${JSON.stringify(cmd.step)}`);
    switch (cmd.action) {
      case 'forward': return this.forward(c, cmd, handlers.forward);
      case 'compensate': return this.compensate(c, cmd, handlers.compensate);
      default: return this.query(c, cmd);
    }
  }

  async forward(c, cmd, fn) {
    await c.query('SAVEPOINT claim');
    if (!(await this.insertPending(c, cmd, 'forward'))) {
      // Decided before: by a copy, or closed by a compensation or a query.
      await c.query('RELEASE SAVEPOINT claim');
      const rec = await this.read(c, cmd, 'forward');
      if (rec.closed) return { outcome: 'failure', reason: rec.reason || REASON_COMPENSATED, payload: null };
      if (rec.outcome === 'accepted') {
        // Still accepted: answered so again; the final reply answers the
        // latest copy.
        await c.query(`UPDATE ${this.t.barrier} SET command_id = $3, attempt = $4, reply_to = $5
          WHERE saga_id = $1 AND step = $2 AND action = 'forward' AND outcome = 'accepted' AND coalesce(attempt, 0) < $4`,
        [cmd.saga_id, cmd.step, cmd.message_id, cmd.attempt, cmd.reply_to]);
        return accepted(rec.cancellable);
      }
      return rec;
    }
    const res = await this.runHandler(c, fn, cmd);
    if (res.outcome === 'accepted') {
      const cancellable = res.cancellable === true;
      await c.query(`UPDATE ${this.t.barrier} SET outcome = 'accepted', command_id = $3, attempt = $4, reply_to = $5, cancellable = $6
        WHERE saga_id = $1 AND step = $2 AND action = 'forward'`, [cmd.saga_id, cmd.step, cmd.message_id, cmd.attempt, cmd.reply_to, cancellable]);
      await c.query('RELEASE SAVEPOINT claim');
      return accepted(cancellable);
    }
    if (res.outcome === 'retry') {
      // Nothing recorded, not even the barrier row: the next copy runs afresh.
      await c.query('ROLLBACK TO SAVEPOINT claim');
      await c.query('RELEASE SAVEPOINT claim');
      return { outcome: 'retry', reason: res.reason, payload: null };
    }
    const rec = await this.record(c, cmd, 'forward', { outcome: res.outcome, reason: res.reason, payload: res.outcome === 'success' ? res.payload : null });
    await c.query('RELEASE SAVEPOINT claim');
    return rec;
  }

  async compensate(c, cmd, fn) {
    await c.query('SAVEPOINT claim');
    if (!(await this.insertPending(c, cmd, 'compensate'))) {
      await c.query('RELEASE SAVEPOINT claim');
      return this.read(c, cmd, 'compensate');
    }
    // Closing the forward waits for a concurrent forward's transaction.
    let empty = await this.closeForward(c, cmd, REASON_COMPENSATED);
    if (!empty) {
      let fwd = await this.read(c, cmd, 'forward');
      if (fwd.outcome === 'accepted' && fwd.cancellable) {
        // Cancelled: the accepted forward is settled as failed.
        const r = await c.query(`UPDATE ${this.t.barrier} SET outcome = 'failure', reason = $3, closed = true
          WHERE saga_id = $1 AND step = $2 AND action = 'forward' AND outcome = 'accepted'`, [cmd.saga_id, cmd.step, REASON_CANCELLED]);
        if (r.rowCount === 0) fwd = await this.read(c, cmd, 'forward'); // settled meanwhile
        else fwd = { outcome: 'failure' };
      }
      if (fwd.outcome === 'accepted') {
        // Held until the forward is settled: record nothing.
        await c.query('ROLLBACK TO SAVEPOINT claim');
        await c.query('RELEASE SAVEPOINT claim');
        return { outcome: 'retry', reason: REASON_HELD, payload: null };
      }
      empty = fwd.outcome === 'failure';
    }
    if (empty || !fn) {
      const rec = await this.record(c, cmd, 'compensate', { outcome: 'success', reason: REASON_EMPTY });
      await c.query('RELEASE SAVEPOINT claim');
      return rec;
    }
    const res = await this.runHandler(c, fn, cmd);
    if (res.outcome === 'success' || res.invalidPayload) {
      const rec = await this.record(c, cmd, 'compensate', res);
      await c.query('RELEASE SAVEPOINT claim');
      return rec;
    }
    // A compensation is retried until it succeeds: record nothing.
    await c.query('ROLLBACK TO SAVEPOINT claim');
    await c.query('RELEASE SAVEPOINT claim');
    return { outcome: 'retry', reason: res.reason, payload: null };
  }

  // query answers what the barrier recorded for the forward, closing it if
  // nothing was (in this transaction, so a late forward is refused).
  async query(c, cmd) {
    const answer = (state, output) => ({ outcome: 'success', reason: '', payload: output ? { state, output } : { state } });
    if (await this.closeForward(c, cmd, REASON_CLOSED_BY_QUERY)) return answer('closed');
    const fwd = await this.read(c, cmd, 'forward');
    if (fwd.closed) return answer('closed');
    if (fwd.outcome === 'failure') return answer('failed');
    if (fwd.outcome === 'accepted') return answer('accepted'); // still pending, not closed
    const comp = await this.read(c, cmd, 'compensate');
    if (comp && comp.outcome === 'success') return answer('compensated');
    return answer('done', fwd.payload);
  }

  // settle records the final outcome (res: {outcome: 'success' | 'failure',
  // reason, payload}) of the accepted forward ref ({saga_id, step}) in the
  // transaction of client c and returns the reply's command (the latest copy
  // the barrier answered accepted) and what was recorded, for the caller to
  // enqueue the reply in that transaction. It throws NotAccepted when the
  // step is not accepted.
  async settle(c, ref, res) {
    const payload = res.payload === null || res.payload === undefined ? null : JSON.stringify(res.payload);
    const r = await c.query(`UPDATE ${this.t.barrier} SET outcome = $3, reason = $4, payload = $5::text::jsonb
      WHERE saga_id = $1 AND step = $2 AND action = 'forward' AND outcome = 'accepted'
      RETURNING command_id::text AS command_id, reply_to, payload::text AS payload`, [ref.saga_id, ref.step, res.outcome, res.reason || '', payload]);
    if (r.rowCount === 0) {
      const fwd = await this.read(c, ref, 'forward');
      const why = fwd === null ? 'nothing recorded' : (fwd.closed ? `cancelled (${fwd.reason})` : `recorded ${fwd.outcome}`);
      throw new NotAccepted(`step ${ref.step} of saga ${ref.saga_id} is not accepted: ${why}`);
    }
    const row = r.rows[0];
    const cmd = { message_id: row.command_id, saga_id: ref.saga_id, step: ref.step, action: 'forward', reply_to: row.reply_to };
    return { cmd, rec: { outcome: res.outcome, reason: res.reason || '', payload: row.payload === null ? null : JSON.parse(row.payload) } };
  }
}

// accepted is the answer to a forward answered accepted.
function accepted(cancellable) {
  return { outcome: 'accepted', reason: '', payload: cancellable ? { cancellable: true } : null };
}

module.exports = { Store, InvalidPayload, NotAccepted, ident };
