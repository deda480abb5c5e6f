package cli_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/sagaflow/sagaflow/inbox/dlq"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/migrations"
)

// `orchestrator dlq` on a live database: list --json, show, redrive
// (refused without a reason, then audited), the same for a participant's
// schema with --schema, and the dead outbox rows requeued.
func TestDLQCommands(t *testing.T) {
	t.Parallel()
	url := testkit.Database(t)
	pool := testkit.PoolURL(t, url)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator("sagaflow")), testkit.MustSets(t)(migrations.Participant("inventory")))
	ctx := context.Background()
	for s, topic := range map[string]string{"sagaflow": "saga.replies", "inventory": "inventory.commands"} {
		if _, err := pool.Exec(ctx, `INSERT INTO `+s+`.dead_letters (topic, partition, "offset", key, value, headers, message_id, reason)
VALUES ('`+topic+`', 0, 7, 'k', '{"a":1}', '{"message-id":"m-1"}', 'm-1', 'stray reply')`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO sagaflow.outbox (topic, key, value, dead_at, attempts, last_error) VALUES ('x', 'k', 'v', now(), 20, 'no topic')`); err != nil {
		t.Fatal(err)
	}
	db := "--database-url=" + url

	out, stderr, code := runCLI(t, "dlq", "list", "--json", db)
	if code != 0 {
		t.Fatalf("dlq list --json: exit %d: %s", code, stderr)
	}
	var page struct {
		DeadLetters []struct {
			ID    int64  `json:"id"`
			Topic string `json:"topic"`
		} `json:"dead_letters"`
		Counts struct {
			DeadLetters int `json:"dead_letters"`
			DeadOutbox  int `json:"dead_outbox"`
		} `json:"counts"`
	}
	if err := json.Unmarshal([]byte(out), &page); err != nil || len(page.DeadLetters) != 1 || page.DeadLetters[0].Topic != "saga.replies" || page.Counts.DeadOutbox != 1 {
		t.Fatalf("dlq list --json = %s (%v); want the orchestrator's one dead letter and one dead outbox row", out, err)
	}
	id := strconv.FormatInt(page.DeadLetters[0].ID, 10)
	if out, _, code := runCLI(t, "dlq", "show", id, db); code != 0 || !strings.Contains(out, "reason   stray reply") || !strings.Contains(out, `{"a":1}`) {
		t.Fatalf("dlq show: exit %d:\n%s", code, out)
	}
	if _, stderr, code := runCLI(t, "dlq", "redrive", id, "--actor", "alice", db); code == 0 || !strings.Contains(stderr, "reason is required") {
		t.Fatalf("dlq redrive without --reason: exit %d: %s; want refused", code, stderr)
	}
	if _, stderr, code := runCLI(t, "dlq", "redrive", db); code == 0 || !strings.Contains(stderr, "--all") {
		t.Fatalf("dlq redrive with nothing named: exit %d: %s; want refused", code, stderr)
	}
	if out, stderr, code := runCLI(t, "dlq", "redrive", id, "--actor", "alice", "--reason", "fixed", db); code != 0 || !strings.Contains(out, "redriven 1") {
		t.Fatalf("dlq redrive: exit %d: %s %s", code, out, stderr)
	}
	if out, _, code := runCLI(t, "dlq", "redrive", id, "--actor", "alice", "--reason", "again", db); code != 0 || !strings.Contains(out, "skipped "+id) {
		t.Fatalf("second dlq redrive: exit %d: %s; want it skipped", code, out)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM sagaflow.outbox WHERE topic = 'saga.replies' AND headers->>'message-id' = 'm-1' AND value = '{"a":1}'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("redriven outbox rows = %d, %v; want 1 with the original value and headers", n, err)
	}
	if out, _, code := runCLI(t, "dlq", "audit", db); code != 0 || !strings.Contains(out, "dlq.redrive") || !strings.Contains(out, "alice") {
		t.Fatalf("dlq audit: exit %d:\n%s", code, out)
	}

	// A participant's schema.
	if out, stderr, code := runCLI(t, "dlq", "redrive", "--all", "--schema", "inventory", "--actor", "bob", "--reason", "replay", "--json", db); code != 0 || !strings.Contains(out, `"ids"`) {
		t.Fatalf("dlq redrive --all --schema inventory: exit %d: %s %s", code, out, stderr)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM inventory.dead_letters WHERE redriven_by = 'bob'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("inventory dead letters redriven by bob = %d, %v; want 1", n, err)
	}

	if _, stderr, code := runCLI(t, "dlq", "list", "--schema", "nosuch", db); code == 0 || !strings.Contains(stderr, "orchestrator migrate") {
		t.Fatalf("dlq list on an unmigrated schema: exit %d: %s; want a hint to migrate", code, stderr)
	}
	if out, _, code := runCLI(t, "dlq", "outbox", db); code != 0 || !strings.Contains(out, "no topic") {
		t.Fatalf("dlq outbox: exit %d:\n%s", code, out)
	}
	if out, stderr, code := runCLI(t, "dlq", "requeue", "--all", "--actor", "carol", "--reason", "topic created", db); code != 0 || !strings.Contains(out, "requeued 1") {
		t.Fatalf("dlq requeue --all: exit %d: %s %s", code, out, stderr)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM sagaflow.outbox WHERE dead_at IS NOT NULL`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("dead outbox rows after requeue = %d, %v; want 0", n, err)
	}
}

// A bulk redrive that fails after its first batch committed prints what it
// redrove, then fails naming the error and how many stay redriven.
func TestDLQBulkRedrivePartlyDone(t *testing.T) {
	t.Parallel()
	url := testkit.Database(t)
	pool := testkit.PoolURL(t, url)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator("sagaflow")))
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO sagaflow.dead_letters (topic, partition, "offset", key, value, message_id, reason)
SELECT 'saga.replies', 0, i, CASE WHEN i = $1 THEN 'poison' ELSE 'k' || i END, 'v', 'm-' || i, 'r' FROM generate_series(1, $1) AS i`, dlq.BatchSize+1); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE FUNCTION sagaflow.refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.key = 'poison' THEN RAISE EXCEPTION 'poison refused'; END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER refuse_poison BEFORE INSERT ON sagaflow.outbox FOR EACH ROW EXECUTE FUNCTION sagaflow.refuse_poison();`); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := runCLI(t, "dlq", "redrive", "--all", "--actor", "alice", "--reason", "fixed", "--database-url="+url)
	if code == 0 || !strings.Contains(stderr, "poison refused") || !strings.Contains(stderr, strconv.Itoa(dlq.BatchSize)+" redriven before it stay so") {
		t.Fatalf("dlq redrive --all with a failing second batch: exit %d, stderr %s; want the error and what stays redriven", code, stderr)
	}
	if !strings.HasPrefix(out, "redriven "+strconv.Itoa(dlq.BatchSize)+" before the error: [") {
		t.Fatalf("dlq redrive --all printed %q; want the ids redriven before the error", out)
	}
}

// TestDLQRedriveOnlyToConsumedTopics: `dlq redrive` publishes only to the
// topics the schema consumes: a dead letter of the orchestrator's schema
// naming another topic than kafka.reply_topic is refused (the topic and the
// allowed one named, nothing enqueued); a schema the binary does not know
// needs --consumes, and with it the redrive goes ahead.
func TestDLQRedriveOnlyToConsumedTopics(t *testing.T) {
	t.Parallel()
	url := testkit.Database(t)
	pool := testkit.PoolURL(t, url)
	testkit.Migrate(t, pool, testkit.MustSets(t)(migrations.Orchestrator("sagaflow")), testkit.MustSets(t)(migrations.Participant("billing")))
	ctx := context.Background()
	var foreign, billing int64
	if err := pool.QueryRow(ctx, `INSERT INTO sagaflow.dead_letters (topic, partition, "offset", key, value, message_id, reason)
VALUES ('payments.ledger', 0, 1, 'k', 'v', 'm-1', 'r') RETURNING id`).Scan(&foreign); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `INSERT INTO billing.dead_letters (topic, partition, "offset", key, value, message_id, reason)
VALUES ('billing.commands', 0, 1, 'k', 'v', 'm-2', 'r') RETURNING id`).Scan(&billing); err != nil {
		t.Fatal(err)
	}
	db := "--database-url=" + url
	audit := []string{"--actor", "alice", "--reason", "fixed", db}
	for _, args := range [][]string{{strconv.FormatInt(foreign, 10)}, {"--all"}} {
		_, stderr, code := runCLI(t, append(append([]string{"dlq", "redrive"}, args...), audit...)...)
		if code == 0 || !strings.Contains(stderr, `"payments.ledger"`) || !strings.Contains(stderr, "saga.replies") {
			t.Fatalf("dlq redrive %v of a foreign topic: exit %d: %s; want refused, naming the topic and saga.replies", args, code, stderr)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM sagaflow.outbox`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d outbox rows (%v), want nothing enqueued", n, err)
	}
	id := strconv.FormatInt(billing, 10)
	if _, stderr, code := runCLI(t, append([]string{"dlq", "redrive", id, "--schema", "billing"}, audit...)...); code == 0 || !strings.Contains(stderr, "--consumes") {
		t.Fatalf("dlq redrive in an unknown schema without --consumes: exit %d: %s; want refused, naming --consumes", code, stderr)
	}
	if out, stderr, code := runCLI(t, append([]string{"dlq", "redrive", id, "--schema", "billing", "--consumes", "billing.commands"}, audit...)...); code != 0 || !strings.Contains(out, "redriven 1") {
		t.Fatalf("dlq redrive --consumes billing.commands: exit %d: %s %s", code, out, stderr)
	}
}
