package conformance_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/internal/cli"
	"github.com/sagaflow/sagaflow/internal/testkit"
	"github.com/sagaflow/sagaflow/participants/conformance"
)

// goRelayPartitioner is the partitioner the Go SDK's relay and dispatcher
// use for the replies they key by saga id: the Java client's murmur2.
const goRelayPartitioner = conformance.PartitionerMurmur2

// runKit runs the kit against command as participant name on brokers and
// logs the report.
func runKit(t *testing.T, brokers []string, name, command, dir, partitioner string) conformance.Report {
	t.Helper()
	var out testkit.Output
	rep, err := conformance.Verify(testkit.Context(t, 5*time.Minute), conformance.Config{
		Participant: name, Command: command, Dir: dir, DatabaseURL: testkit.AdminURL(), Brokers: brokers,
		Partitioner: partitioner, Output: &out,
	})
	if err != nil {
		t.Fatalf("kit against %s: %v\nparticipant output:\n%s", name, err, out.String())
	}
	var buf bytes.Buffer
	_ = rep.WriteText(&buf)
	t.Logf("kit against %s (%s):\n%s", name, command, buf.String())
	if !rep.OK() && testing.Verbose() {
		t.Logf("participant output:\n%s", out.String())
	}
	return rep
}

func requireAllPassed(t *testing.T, rep conformance.Report) {
	t.Helper()
	if !rep.OK() {
		t.Fatalf("%s: %d passed, %d failed, want every check passed", rep.Participant, rep.Passed, rep.Failed)
	}
	if rep.Passed < 25 {
		t.Fatalf("%s: only %d checks ran", rep.Participant, rep.Passed)
	}
}

// TestKitGoParticipant runs the kit against the Go participant of the
// conformance step (every check passes) and against the same participant
// with its barrier skipped (every copy executed: the idempotency checks
// fail), on one broker.
func TestKitGoParticipant(t *testing.T) {
	t.Parallel()
	brokers := testkit.Brokers(t)
	// Run is what a participant's own test calls: every check passes.
	requireAllPassed(t, conformance.Run(t, conformance.Config{
		Participant: "inventory_" + testkit.RandomSuffix(3), Command: selfCommand(t, "go"), Brokers: brokers,
		DatabaseURL: testkit.AdminURL(), Partitioner: goRelayPartitioner,
	}))

	rep := runKit(t, brokers, "broken_"+testkit.RandomSuffix(3), selfCommand(t, "broken"), "", goRelayPartitioner)
	if rep.OK() {
		t.Fatal("the kit passed a participant that skips its barrier")
	}
	for _, name := range conformance.IdempotencyChecks {
		c, ok := rep.Check(name)
		if !ok || c.Passed {
			t.Errorf("check %s: %+v (ran: %v), want FAIL for a participant that executes every copy", name, c, ok)
		}
	}
	if c, _ := rep.Check(conformance.CheckAnswers); !c.Passed {
		t.Errorf("the broken participant should still answer: %+v", c)
	}
}

// A participant that does not verify the commands' signatures (it answers
// a command whose payload was changed after signing, and an unsigned one)
// fails the signature checks, and only them.
func TestKitFailsParticipantThatDoesNotVerifyCommands(t *testing.T) {
	t.Parallel()
	rep := runKit(t, testkit.Brokers(t), "noverify_"+testkit.RandomSuffix(3), selfCommand(t, "noverify"), "", goRelayPartitioner)
	for _, name := range conformance.SignatureChecks {
		c, ok := rep.Check(name)
		if !ok || c.Passed || !(strings.Contains(c.Why, "effect rows") || strings.Contains(c.Why, "answered")) {
			t.Errorf("check %s: %+v (ran: %v), want FAIL: the command was executed", name, c, ok)
		}
	}
	if rep.Failed != len(conformance.SignatureChecks) {
		t.Errorf("%d checks failed, want only the %d signature checks", rep.Failed, len(conformance.SignatureChecks))
	}
	if c, _ := rep.Check(conformance.CheckReplySigned); !c.Passed {
		t.Errorf("its replies are signed all the same: %+v", c)
	}
}

// TestKitCommand runs `orchestrator conformance` against the Go
// participant: a line per check, the summary line, exit status 0; with
// --json one object; exit status 1 when a check fails (here the reply
// partitions checked against the partitioner the Go relay does not use);
// and on a throwaway Postgres when database.url does not answer.
func TestKitCommand(t *testing.T) {
	t.Parallel()
	args := []string{"conformance", "--participant", "inventory", "--cmd", selfCommand(t, "go"),
		"--database-url", testkit.AdminURL(), "--log-level", "warn", "--timeout", "20s"}
	var stdout, stderr bytes.Buffer
	code := cli.Main(append(args, "--partitioner", goRelayPartitioner), &stdout, &stderr)
	out := stdout.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || !strings.HasSuffix(lines[len(lines)-1], " passed, 0 failed") {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, out, stderr.String())
	}
	for _, l := range lines[:len(lines)-1] {
		if !strings.HasPrefix(l, "PASS ") {
			t.Errorf("line %q, want PASS name", l)
		}
	}

	stdout.Reset()
	other := conformance.PartitionerMurmur2
	if goRelayPartitioner == other {
		other = conformance.PartitionerFNV1a
	}
	code = cli.Main(append(args, "--json", "--partitioner", other), &stdout, &stderr)
	var rep conformance.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, stdout.String())
	}
	c, _ := rep.Check(conformance.CheckReplyPartition + "-" + other)
	if code != 1 || rep.Failed != 1 || c.Passed || !strings.Contains(c.Why, "partitioner's") {
		t.Fatalf("against --partitioner %s: exit %d, %d failed, check %+v; want exit 1 and the partition check failed", other, code, rep.Failed, c)
	}

	stdout.Reset()
	dead := "postgres://postgres@" + testkit.FreeAddr(t) + "/postgres?sslmode=disable"
	code = cli.Main([]string{"conformance", "--participant", "inventory", "--cmd", selfCommand(t, "go"),
		"--database-url", dead, "--log-level", "warn", "--partitioner", goRelayPartitioner}, &stdout, &stderr)
	if code != 0 || !strings.HasSuffix(strings.TrimSpace(stdout.String()), " passed, 0 failed") {
		t.Fatalf("with database.url not answering: exit %d, stdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
}

// TestKitParticipantThatNeverAnswers: a participant that runs but never
// answers fails the first check, and the kit kills its whole process group
// (a shell with a child in the background) at the end.
func TestKitParticipantThatNeverAnswers(t *testing.T) {
	t.Parallel()
	// A sleep of its own length, to find its processes by.
	marker := fmt.Sprintf("%d.%d", 900+time.Now().Nanosecond()%99, 1+time.Now().UnixNano()%99991)
	rep, err := conformance.Verify(testkit.Context(t, time.Minute), conformance.Config{
		Participant: "silent", Command: "sleep " + marker + " & sleep " + marker + "; wait",
		DatabaseURL: testkit.AdminURL(), StartTimeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := rep.Check(conformance.CheckAnswers)
	if rep.OK() || c.Passed || !strings.Contains(c.Why, "no answer within 2s") || rep.Passed != 0 {
		t.Fatalf("report %+v, want only a failed %s check", rep, conformance.CheckAnswers)
	}
	if left := processesWith(t, "sleep "+marker); len(left) > 0 {
		t.Fatalf("processes of the participant's group left running: %v", left)
	}

	rep, err = conformance.Verify(testkit.Context(t, time.Minute), conformance.Config{
		Participant: "quits", Command: "echo cannot start >&2; exit 3", DatabaseURL: testkit.AdminURL(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := rep.Check(conformance.CheckAnswers); c.Passed || !strings.Contains(c.Why, "exit status 3") || !strings.Contains(c.Why, "cannot start") {
		t.Fatalf("check %+v, want the exit status and the output", c)
	}
}

// processesWith lists the pids whose command line contains s.
func processesWith(t *testing.T, s string) []string {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue // gone
		}
		if strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), s) {
			pids = append(pids, filepath.Base(filepath.Dir(d)))
		}
	}
	return pids
}
