'use strict';
// The conformance step (docs/DESIGN.md, "The conformance step"): a forward
// {"key", "mode"} that records one effect row for the key (succeed), answers
// a business failure (fail) or a transient one (retry); its compensation
// deletes the saga's effect rows. Both answer {"key", "effects": rows for
// the key now}, so the kit sees how often the effect happened.

const { InvalidPayload } = require('./store');

const STEP = 'conformance';
const MODES = ['succeed', 'fail', 'retry'];

function input(cmd, needMode) {
  const p = cmd.payload;
  if (!p || typeof p.key !== 'string' || p.key === '') throw new InvalidPayload('payload field "key" is missing or empty');
  if (needMode && !MODES.includes(p.mode)) throw new InvalidPayload(`payload field "mode" ${JSON.stringify(p.mode)}: want succeed, fail or retry`);
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

module.exports = { conformanceStep };
