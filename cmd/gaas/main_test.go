package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trisparc/gaas/api"
	"github.com/trisparc/gaas/examples"
	"github.com/trisparc/gaas/testnet"
)

type result struct {
	code           int
	stdout, stderr string
}

// gaas runs one command in-process with the given environment.
func gaas(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	return runCLI(&cli{getenv: func(k string) string { return env[k] }}, args)
}

// gaasOnTerminal runs a command as if stderr were a terminal, so that
// progress bars are drawn.
func gaasOnTerminal(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	return runCLI(&cli{getenv: func(k string) string { return env[k] }, progressTTY: true}, args)
}

func runCLI(c *cli, args []string) result {
	var out, errb bytes.Buffer
	c.stdin, c.stdout, c.stderr = strings.NewReader(""), &out, &errb
	code := c.exitCode(c.run(context.Background(), args))
	return result{code, out.String(), errb.String()}
}

func startTestnet(t *testing.T, providers int) (map[string]string, *testnet.Testnet) {
	t.Helper()
	tn, err := testnet.Start(context.Background(), testnet.Config{
		Dir: t.TempDir(), Providers: providers, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tn.Close() })
	return map[string]string{"GAAS_NODE": tn.Info.Buyer.API, "GAAS_TOKEN": tn.Info.Buyer.Token}, tn
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSubmitDownloadsModelAndReportsCharge(t *testing.T) {
	env, _ := startTestnet(t, 3)
	dir := t.TempDir()
	ds := writeFile(t, dir, "students.csv", examples.Dataset)
	sc := writeFile(t, dir, "train.py", examples.Script)
	out := t.TempDir()
	r := gaasOnTerminal(t, env, "job", "submit", "--tier", "max", "--dataset", ds, "--script", sc, "--max-hours", "0.5", "--out", out, "--yes")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	size := formatBytes(int64(len(examples.Dataset)))
	for _, want := range []string{"\rUploading students.csv [========================] 100%  " + size + " of " + size, "\rUploading train.py [", "\rDownloading model.json ["} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("progress on stderr lacks %q:\n%q", want, r.stderr)
		}
	}
	if strings.Contains(r.stdout, "\r") {
		t.Errorf("progress leaked onto stdout:\n%q", r.stdout)
	}
	for _, want := range []string{"students.csv: 600 rows, 4 columns", "main() found", "at ₹120/hr", "costs at most ₹60", "state: running", "| test accuracy", "state: completed", "Charge    ₹"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	model, err := os.ReadFile(filepath.Join(out, "model.json"))
	if err != nil || !json.Valid(model) {
		t.Fatalf("model on disk: %v %s", err, model)
	}

	r = gaas(t, env, "job", "list", "--json")
	var list api.JobList
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || list.Total != 1 || list.Jobs[0].State != "completed" {
		t.Fatalf("job list --json: %v %s", err, r.stdout)
	}
	id := list.Jobs[0].ID
	r = gaas(t, env, "job", "show", id, "--json")
	var job api.Job
	if err := json.Unmarshal([]byte(r.stdout), &job); err != nil || job.ID != id || job.Model == nil {
		t.Fatalf("job show --json: %v %s", err, r.stdout)
	}
	if r = gaas(t, env, "job", "logs", id); r.code != 0 || !strings.Contains(r.stdout, "saved model.json") {
		t.Fatalf("job logs: %d %s", r.code, r.stdout)
	}
	again := t.TempDir()
	if r = gaas(t, env, "job", "model", id, "--out", again); r.code != 0 || r.stderr != "" {
		t.Fatalf("job model (no terminal, so no progress bar): %+v", r)
	}
	if saved, _ := os.ReadFile(filepath.Join(again, "model.json")); !bytes.Equal(saved, model) {
		t.Fatal("job model saved different bytes")
	}
	for _, want := range []string{id + "-model.json", id + "-2-model.json"} { // never overwrites
		if r = gaas(t, env, "job", "model", id, "--out", again); r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Fatalf("saving again: %+v, want %s", r, want)
		}
	}
	r = gaas(t, env, "ledger", "balance", "--json")
	var b api.Balance
	if err := json.Unmarshal([]byte(r.stdout), &b); err != nil || b.Available != testnet.DefaultBuyerCredit-job.Charged {
		t.Fatalf("ledger balance --json: %v %s (charged %d)", err, r.stdout, job.Charged)
	}
}

func TestFailedJobExitsNonZeroWithExplanation(t *testing.T) {
	env, _ := startTestnet(t, 1)
	dir := t.TempDir()
	ds := writeFile(t, dir, "students.csv", examples.Dataset)
	sc := writeFile(t, dir, "train.py", []byte("def main():\n    raise RuntimeError('learning rate is NaN')\n"))
	r := gaas(t, env, "job", "submit", "--tier", "starter", "--dataset", ds, "--script", sc, "--out", t.TempDir(), "--yes")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s", r.code, r.stdout)
	}
	for _, want := range []string{"Failed    Your script stopped with RuntimeError: learning rate is NaN.", "Charge    Not charged", "Traceback (most recent call last):"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
}

// TestBadInputs checks that each mistake gets one clear sentence, a
// non-zero exit, and leaves nothing behind: no job, no hold, no upload.
func TestBadInputs(t *testing.T) {
	env, tn := startTestnet(t, 1)
	dir := t.TempDir()
	ds := writeFile(t, dir, "students.csv", examples.Dataset)
	sc := writeFile(t, dir, "train.py", examples.Script)
	binary := writeFile(t, dir, "photo.csv", []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"))
	ragged := writeFile(t, dir, "ragged.csv", []byte("a,b\n1,2\n3\n"))
	noMain := writeFile(t, dir, "nomain.py", []byte("def train():\n    pass\n"))
	broken := writeFile(t, dir, "broken.py", []byte("def main(:\n    pass\n"))
	out := t.TempDir()
	submit := func(extra ...string) []string {
		return append([]string{"job", "submit", "--out", out, "--yes"}, extra...)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		code int
		want string
	}{
		{"missing dataset", env, submit("--tier", "pro", "--dataset", filepath.Join(dir, "nope.csv"), "--script", sc), 1, "the dataset file " + filepath.Join(dir, "nope.csv") + " does not exist"},
		{"not a CSV", env, submit("--tier", "pro", "--dataset", binary, "--script", sc), 1, "The dataset is not a CSV file"},
		{"ragged CSV", env, submit("--tier", "pro", "--dataset", ragged, "--script", sc), 1, "Line 3 of the dataset has a different number of columns"},
		{"no main", env, submit("--tier", "pro", "--dataset", ds, "--script", noMain), 1, "nomain.py has no top-level main() function"},
		{"syntax error", env, submit("--tier", "pro", "--dataset", ds, "--script", broken), 1, "broken.py has a syntax error on line 1"},
		{"unknown tier", env, submit("--tier", "ultra", "--dataset", ds, "--script", sc), 1, `there is no "ultra" tier: choose one of starter, pro, max`},
		{"bad package", env, submit("--tier", "pro", "--dataset", ds, "--script", sc, "--package", "--index-url=http://x"), 1, "is a pip option"},
		{"bad cap", env, submit("--tier", "pro", "--dataset", ds, "--script", sc, "--max-hours", "zero"), 2, "--max-hours must be a number of hours"},
		{"no tier", env, submit("--dataset", ds, "--script", sc), 2, "choose a GPU tier with --tier"},
		{"node not answering", map[string]string{"GAAS_NODE": "http://127.0.0.1:1", "GAAS_TOKEN": "x"}, submit("--tier", "pro", "--dataset", ds, "--script", sc), 1, "could not reach the GaaS node at http://127.0.0.1:1"},
		{"wrong token", map[string]string{"GAAS_NODE": env["GAAS_NODE"], "GAAS_TOKEN": "wrong"}, []string{"job", "list"}, 1, "Missing or wrong API token"},
		{"no confirmation", env, []string{"job", "submit", "--tier", "pro", "--dataset", ds, "--script", sc, "--out", out}, 1, "pass --yes to accept it"},
		{"unknown job", env, []string{"job", "show", "j-0000"}, 1, `There is no job "j-0000" on this node.`},
		{"unknown command", env, []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := gaas(t, tc.env, tc.args...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d (want %d), stderr %q, want %q\nstdout: %s", r.code, tc.code, r.stderr, tc.want, r.stdout)
			}
			if strings.Count(strings.TrimSpace(r.stderr), "\n") > 1 {
				t.Errorf("more than a sentence on stderr: %q", r.stderr)
			}
		})
	}
	r := gaas(t, env, "job", "list", "--json")
	if !strings.Contains(r.stdout, `"total":0`) {
		t.Fatalf("bad inputs left jobs behind: %s", r.stdout)
	}
	b, err := api.NewClient(env["GAAS_NODE"], env["GAAS_TOKEN"]).Balance(context.Background())
	if err != nil || b.Available != testnet.DefaultBuyerCredit || b.Held != 0 {
		t.Fatalf("bad inputs touched the balance: %+v %v", b, err)
	}
	if left, _ := os.ReadDir(filepath.Join(tn.Info.Buyer.Data, "tmp")); len(left) != 0 {
		t.Fatalf("rejected uploads left %d temporary files", len(left))
	}
	if left, _ := os.ReadDir(out); len(left) != 0 {
		t.Fatalf("the output folder has %d files after failed submits", len(left))
	}
}

func TestHelp(t *testing.T) {
	r := gaas(t, nil, "help")
	for _, want := range []string{"testnet", "job submit", "ledger balance", "GAAS_NODE"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Fatalf("help lacks %q", want)
		}
	}
	if r := gaas(t, nil, "testnet", "--help"); r.code != 0 || !strings.Contains(r.stdout, "-providers") || !strings.Contains(r.stdout, "GAAS_TESTNET_DIR") {
		t.Fatalf("testnet --help: %+v", r)
	}
}

func TestSandboxRun(t *testing.T) {
	dir := t.TempDir()
	ds := writeFile(t, dir, "students.csv", examples.Dataset)
	sc := writeFile(t, dir, "train.py", examples.Script)
	out := t.TempDir()
	env := map[string]string{"GAAS_DATA": t.TempDir()}
	r := gaas(t, env, "sandbox", "run", sc, "--dataset", ds, "--out", out)
	if r.code != 0 || !strings.Contains(r.stdout, "Ended     main() returned") || !strings.Contains(r.stdout, "memory") {
		t.Fatalf("sandbox run: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(out, "model.json")); err != nil {
		t.Fatalf("model not exported: %v", err)
	}
	bad := writeFile(t, dir, "bad.py", []byte("def main():\n    raise SystemExit(3)\n"))
	if r := gaas(t, env, "sandbox", "run", bad, "--out", out); r.code != 1 || !strings.Contains(r.stdout, "exited with status 3") {
		t.Fatalf("failing script: %+v", r)
	}
	if r := gaas(t, env, "sandbox", "run", ds); r.code != 1 || !strings.Contains(r.stderr, "must be a .py file") {
		t.Fatalf("not a script: %+v", r)
	}
}

func TestLedgerCommands(t *testing.T) {
	env, tn := startTestnet(t, 1)
	op := map[string]string{"GAAS_COORDINATOR": pickAddr(tn.Info.Coordinator.Addrs), "GAAS_OPERATOR_KEY": tn.Info.Operator.KeyFile}
	for i := 0; i < 2; i++ { // a retry with the same key credits once
		if r := gaas(t, op, "ledger", "credit", tn.Info.Buyer.Peer, "250.50", "--key", "upi-1"); r.code != 0 || !strings.Contains(r.stdout, "Credited ₹250.50 to buyer:") {
			t.Fatalf("credit: %+v", r)
		}
	}
	b, _ := api.NewClient(env["GAAS_NODE"], env["GAAS_TOKEN"]).Balance(context.Background())
	if b.Available != testnet.DefaultBuyerCredit+25050 {
		t.Fatalf("balance after a credit and its retry: %d", b.Available)
	}
	if r := gaas(t, op, "ledger", "credit", tn.Info.Buyer.Peer, "1", "--key", "upi-1"); r.code != 1 || !strings.Contains(r.stderr, "already used for a different request") {
		t.Fatalf("same key, other amount: %+v", r)
	}
	impostor := map[string]string{"GAAS_COORDINATOR": op["GAAS_COORDINATOR"], "GAAS_OPERATOR_KEY": filepath.Join(tn.Info.Buyer.Data, "identity.key")}
	if r := gaas(t, impostor, "ledger", "credit", tn.Info.Buyer.Peer, "1000"); r.code != 1 || !strings.Contains(r.stderr, "Only the coordinator's operator may credit") {
		t.Fatalf("a buyer's key crediting: %+v", r)
	}
	if r := gaas(t, op, "ledger", "verify"); r.code != 0 || !strings.Contains(r.stdout, "Verified: every invariant holds.") {
		t.Fatalf("verify: %+v", r)
	}
	if r := gaas(t, nil, "ledger", "verify"); r.code != 2 || !strings.Contains(r.stderr, "operator's command") {
		t.Fatalf("verify without the operator's key: %+v", r)
	}
	if r := gaas(t, env, "ledger", "history"); r.code != 0 || strings.Count(r.stdout, "\n") != 3 || !strings.Contains(r.stdout, "+₹250.50") {
		t.Fatalf("history: %+v", r)
	}
	if r := gaas(t, env, "ledger", "payout", "5"); r.code != 1 || !strings.Contains(r.stderr, "does not hold that much") {
		t.Fatalf("payout with no earnings: %+v", r)
	}
}

func TestRenderProgress(t *testing.T) {
	for _, tc := range []struct {
		done, total int64
		elapsed     time.Duration
		want        string
	}{
		{0, 117_000_000, 0, "f.csv [>                       ]   0%  0 B of 117 MB"},
		{61_000_000, 117_000_000, time.Second, "f.csv [============>           ]  52%  61 MB of 117 MB  61 MB/s"},
		{117_000_000, 117_000_000, 2 * time.Second, "f.csv [========================] 100%  117 MB of 117 MB  58 MB/s"},
		{200, 100, time.Second, "f.csv [========================] 100%  100 B of 100 B  200 B/s"},
		{4_200, -1, 2 * time.Second, "f.csv  4.2 KB  2.1 KB/s"},
		{1_100_000_000, -1, 0, "f.csv  1.1 GB"},
	} {
		if got := renderProgress("f.csv", tc.done, tc.total, tc.elapsed); got != tc.want {
			t.Errorf("renderProgress(%d, %d, %v) = %q, want %q", tc.done, tc.total, tc.elapsed, got, tc.want)
		}
	}
}
