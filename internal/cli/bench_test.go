package cli_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sagaflow/sagaflow/internal/cli"
	"github.com/sagaflow/sagaflow/internal/testkit"
)

// --repeat runs the measurement several times on a real database and the
// embedded broker and reports every run and the medians; nonsense
// combinations are refused before anything runs.
func TestBenchRepeatReportsRunsAndMedian(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	root := cli.Root(&out, &errb)
	db := "sftest_benchrep_" + testkit.RandomSuffix(4)
	t.Cleanup(func() { testkit.DropDatabase(t, db) })
	root.SetArgs([]string{"bench", "--database-url", testkit.AdminURL(), "--database", db,
		"--sagas", "40", "--warmup", "5", "--concurrency", "8", "--repeat", "2", "--json"})
	if err := root.Execute(); err != nil {
		t.Fatalf("bench --repeat 2: %v\n%s", err, errb.String())
	}
	var got struct {
		Runs []struct {
			Sagas     int     `json:"sagas"`
			PerSecond float64 `json:"sagas_per_second"`
		} `json:"runs"`
		Median struct {
			Sagas       int     `json:"sagas"`
			PerSecond   float64 `json:"sagas_per_second"`
			AllComplete bool    `json:"all_completed"`
		} `json:"median"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("output is not the runs-and-median object: %v\n%s", err, out.String())
	}
	if len(got.Runs) != 2 || got.Median.Sagas != 80 || !got.Median.AllComplete || got.Median.PerSecond <= 0 {
		t.Fatalf("runs %d, median %+v; want 2 runs, 80 sagas, all complete", len(got.Runs), got.Median)
	}
	lo, hi := min(got.Runs[0].PerSecond, got.Runs[1].PerSecond), max(got.Runs[0].PerSecond, got.Runs[1].PerSecond)
	if got.Median.PerSecond < lo || got.Median.PerSecond > hi {
		t.Fatalf("median %v/s outside the runs' %v..%v", got.Median.PerSecond, lo, hi)
	}
	for _, args := range [][]string{
		{"bench", "--repeat", "0"},
		{"bench", "--repeat", "2", "--sweep", "1,2"},
		{"bench", "--repeat", "2", "--cpuprofile", "x.prof"},
	} {
		var o, e bytes.Buffer
		r := cli.Root(&o, &e)
		r.SetArgs(args)
		err := r.Execute()
		if err == nil || !strings.Contains(err.Error(), "--repeat") {
			t.Errorf("%v: error %v, want one naming --repeat", args, err)
		}
	}
}

// bench --floor runs its chains on a real database and the embedded broker
// and prints the floor; the flags of a saga run are refused by name.
func TestBenchFloorPrintsTheFloorAndRefusesSagaFlags(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	root := cli.Root(&out, &errb)
	db := "sftest_benchfloor_" + testkit.RandomSuffix(4)
	t.Cleanup(func() { testkit.DropDatabase(t, db) })
	root.SetArgs([]string{"bench", "--floor", "--database-url", testkit.AdminURL(), "--database", db,
		"--steps", "2", "--sagas", "20", "--warmup", "2"})
	if err := root.Execute(); err != nil {
		t.Fatalf("bench --floor: %v\n%s", err, errb.String())
	}
	for _, want := range []string{"floor of a lone 2-step saga: 5 durable commits and 4 Kafka hops one after the other, 20 chains", "chain      p50 ", "commit     p50 ", "hop        p50 "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--floor", "--concurrency", "4"}, "--floor and --concurrency"},
		{[]string{"bench", "--floor", "--split"}, "--floor and --split"},
		{[]string{"bench", "--floor", "--saga", "place-order"}, "--floor and --saga"},
		{[]string{"bench", "--floor", "--repeat", "3"}, "--floor and --repeat"},
	} {
		var o, e bytes.Buffer
		r := cli.Root(&o, &e)
		r.SetArgs(c.args)
		if err := r.Execute(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one naming %q", c.args, err, c.want)
		}
	}
}
