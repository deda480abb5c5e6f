'use strict';
// The conformance step (docs/DESIGN.md, "The conformance step"): a forward
// {"key", "mode"} that records one effect row for the key (succeed), answers
// a business failure (fail) or a transient one (retry); its compensation
// deletes the saga's effect rows. Both answer {"key", "effects": rows for
// the key now}, so the kit sees how often the effect happened.
//
// Answer later: mode accept records nothing and answers accepted; the step
// conformance-finish {"key", "saga_id", "outcome"} settles that accepted
// step from its own handler's transaction (participant.settle), the way a
// real participant finishes work later from any code path.

const { InvalidPayload, NotAccepted } = require('./store');

const STEP = 'conformance';
const FINISH_STEP = 'conformance-finish';
const MODES = ['succeed', 'fail', 'retry', 'accept'];

function input(cmd, needMode) {
  const p = cmd.payload;
  if (!p || typeof p.key !== 'string' || p.key === '') throw new InvalidPayload('payload field "key" is missing or empty');
  if (needMode && !MODES.includes(p.mode)) throw new InvalidPayload(`payload field "mode" ${JSON.stringify(p.mode)}: want succeed, fail, retry or accept`);
  return p;
}

function conformanceStep(store) {
  const effects = store.q('conformance_effects');
  const count = async (c, key) => {
    const r = await c.query(`SELECT count(*)::int AS n FROM ${effects} WHERE key = $1`, [key]);
    return { outcome: 'success', payload: { key, effects: r.rows[0].n } };
  };
  return {
    name: STEP,
    ddl: [
      `CREATE TABLE IF NOT EXISTS ${effects} (id bigserial PRIMARY KEY, key text NOT NULL, saga_id uuid NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now())`,
      `CREATE INDEX IF NOT EXISTS conformance_effects_key_idx ON ${effects} (key)`,
    ],
    async forward(c, cmd) {
      const { key, mode } = input(cmd, true);
      if (mode === 'fail') return { outcome: 'failure', reason: 'conformance_fail' };
      if (mode === 'retry') return { outcome: 'retry', reason: 'conformance_retry' };
      if (mode === 'accept') return { outcome: 'accepted' }; // settled by a finish
      await c.query(`INSERT INTO ${effects} (key, saga_id) VALUES ($1, $2)`, [key, cmd.saga_id]);
      return count(c, key);
    },
    async compensate(c, cmd) {
      const { key } = input(cmd, false);
      await c.query(`DELETE FROM ${effects} WHERE key = $1 AND saga_id = $2`, [key, cmd.saga_id]);
      return count(c, key);
    },
  };
}

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

// finishStep settles the accepted conformance step its payload names:
// success records one effect row for the key and completes the step with
// {"key", "effects"}; failure fails it with conformance_fail. It answers
// success {"key", "effects"} itself, or failure not_accepted when the step
// is not accepted (then it changes nothing). settle(c, ref, res) is the
// participant's (lib/participant.js): it records the outcome and enqueues
// the final reply in the transaction of c.
function finishStep(store, settle) {
  const effects = store.q('conformance_effects');
  const count = async (c, key) => {
    const r = await c.query(`SELECT count(*)::int AS n FROM ${effects} WHERE key = $1`, [key]);
    return { key, effects: r.rows[0].n };
  };
  return {
    name: FINISH_STEP,
    async forward(c, cmd) {
      const p = cmd.payload;
      if (!p || typeof p.key !== 'string' || p.key === '') throw new InvalidPayload('payload field "key" is missing or empty');
      if (typeof p.saga_id !== 'string' || !UUID_RE.test(p.saga_id)) throw new InvalidPayload('payload field "saga_id" is not a saga id');
      if (p.outcome !== 'success' && p.outcome !== 'failure') throw new InvalidPayload(`payload field "outcome" ${JSON.stringify(p.outcome)}: want success or failure`);
      const ref = { saga_id: p.saga_id, step: STEP };
      try {
        if (p.outcome === 'success') {
          await c.query(`INSERT INTO ${effects} (key, saga_id) VALUES ($1, $2)`, [p.key, p.saga_id]);
          const out = await count(c, p.key);
          await settle(c, ref, { outcome: 'success', payload: out });
          return { outcome: 'success', payload: out };
        }
        await settle(c, ref, { outcome: 'failure', reason: 'conformance_fail' });
        return { outcome: 'success', payload: await count(c, p.key) };
      } catch (e) {
        if (e instanceof NotAccepted) return { outcome: 'failure', reason: 'not_accepted' };
        throw e;
      }
    },
  };
}

module.exports = { conformanceStep, finishStep };
