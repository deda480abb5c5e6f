package inbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sagaflow/sagaflow/internal/jsonlite"
	"github.com/sagaflow/sagaflow/message"
)

// MaxDeadHeaderTextBytes bounds a header value kept in the dead_letters
// table (keys are cut to 256 bytes).
const MaxDeadHeaderTextBytes = 16 << 10

// deadRowsSQL inserts a batch's dead letters into <schema>.dead_letters
// (migrations, messaging set) for `orchestrator dlq`: the original topic,
// coordinates, key, value and headers, the reason, and whether it is a
// stray reply (Result.Stray).
func deadRowsSQL(schema string) string {
	return `INSERT INTO ` + pgx.Identifier{schema, "dead_letters"}.Sanitize() + `
(topic, partition, "offset", key, value, headers, message_id, reason, stray)
SELECT * FROM unnest($1::text[], $2::int4[], $3::int8[], $4::text[], $5::bytea[], $6::jsonb[], $7::text[], $8::text[], $9::bool[])`
}

// recordDead writes deads into the dead_letters table in the batch's
// transaction, so a dead letter is kept exactly when its batch commits.
// Text that Postgres would refuse (NUL, invalid UTF-8) is replaced: the
// dead-letter topic keeps the exact bytes.
func (c *Consumer) recordDead(ctx context.Context, tx pgx.Tx, deads []dead) error {
	n := len(deads)
	topics, keys, ids, reasons := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	parts, offsets := make([]int32, n), make([]int64, n)
	stray := make([]bool, n)
	values, headers := make([][]byte, n), make([][]byte, n)
	for i, d := range deads {
		topics[i] = cleanText(d.m.Topic, 512)
		parts[i], offsets[i] = int32(d.m.Partition), d.m.Offset
		keys[i] = cleanText(string(d.m.Key), MaxDeadHeaderTextBytes)
		values[i] = d.m.Value
		if values[i] == nil {
			values[i] = []byte{}
		}
		hs := make(map[string]string, len(d.m.Headers))
		for _, h := range d.m.Headers {
			k := cleanText(h.Key, 256)
			if _, ok := hs[k]; !ok { // the first of repeated keys
				hs[k] = cleanText(string(h.Value), MaxDeadHeaderTextBytes)
			}
			if h.Key == message.HeaderMessageID {
				ids[i] = cleanText(string(h.Value), 128)
			}
		}
		headers[i] = jsonlite.AppendStringMap(nil, hs)
		reasons[i] = cleanText(d.reason, MaxReasonBytes)
		stray[i] = d.stray
	}
	if _, err := tx.Exec(ctx, c.deadRows, topics, parts, offsets, keys, values, headers, ids, reasons, stray); err != nil {
		return fmt.Errorf("inbox: record %d dead letters in %s.dead_letters: %w", n, c.cfg.Schema, err)
	}
	return nil
}
