package external

import "github.com/jackc/pgx/v5"

// statements is the SQL of the calls table of one schema.
type statements struct {
	intend, claim, retry, settle, state, lookup string
}

func newStatements(schema string) statements {
	t := pgx.Identifier{schema, "external_calls"}.Sanitize()
	return statements{
		intend: `INSERT INTO ` + t + ` (saga_id, step, idempotency_key, request, next_at)
VALUES ($1, $2, $3, $4::text::jsonb, $5) ON CONFLICT DO NOTHING`,
		// claim leases up to $3 due calls of step $4 until $2.
		claim: `UPDATE ` + t + ` SET lease_until = $2, attempts = attempts + 1, updated_at = now()
WHERE (saga_id, step) IN (
	SELECT saga_id, step FROM ` + t + `
	WHERE state = 'pending' AND step = $4 AND next_at <= $1 AND (lease_until IS NULL OR lease_until <= $1)
	ORDER BY next_at LIMIT $3 FOR UPDATE SKIP LOCKED)
RETURNING saga_id, step, idempotency_key, request::text, attempts, lookup`,
		// retry releases a call (still leased by this attempt: $3) for
		// another attempt at $4.
		retry: `UPDATE ` + t + ` SET lease_until = NULL, next_at = $4, last_error = $5, updated_at = now()
WHERE saga_id = $1 AND step = $2 AND state = 'pending' AND attempts = $3`,
		settle: `UPDATE ` + t + ` SET state = $3, output = $4::text::jsonb, last_error = $5, lease_until = NULL, updated_at = now()
WHERE saga_id = $1 AND step = $2 AND state = 'pending'`,
		state: `SELECT state, attempts, last_error FROM ` + t + ` WHERE saga_id = $1 AND step = $2`,
		// lookup asks for a lookup of a pending call, due at once.
		lookup: `UPDATE ` + t + ` SET lookup = true, next_at = least(next_at, $3), updated_at = now()
WHERE saga_id = $1 AND step = $2 AND state = 'pending'`,
	}
}
