package testnet

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trisparc/gaas/api"
	"github.com/trisparc/gaas/examples"
	"github.com/trisparc/gaas/gpu"
	"github.com/trisparc/gaas/internal/testwheel"
	"github.com/trisparc/gaas/money"
	"github.com/trisparc/gaas/node"
)

// sleeper prints "started" and then waits for a minute: long enough to
// be cancelled or lose its provider mid-run.
var sleeper = []byte("import time\ndef main():\n    print('started', flush=True)\n    time.sleep(60)\n")

// waitForLine follows a job until its script prints line.
func waitForLine(t *testing.T, c *api.Client, id, line string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ch, err := c.Events(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	for ev := range ch {
		if ev.Kind == api.EventLog && ev.Line == line {
			return
		}
	}
	t.Fatalf("job %s never printed %q", id, line)
}

func TestCancelRunningJobChargesSecondsUsed(t *testing.T) {
	_, c := start(t, 3)
	ctx := context.Background()
	job := submit(t, c, "pro", examples.Dataset, sleeper)
	waitForLine(t, c, job.ID, "started")
	time.Sleep(1200 * time.Millisecond) // at least one whole metered second
	if _, err := c.CancelJob(ctx, job.ID); err != nil {
		t.Fatal(err)
	}
	follow(t, c, job.ID)
	job, _ = c.Job(ctx, job.ID)
	if job.State != "cancelled" || job.Model != nil || !job.Settled {
		t.Fatalf("after cancel: %+v", job)
	}
	want, _ := money.Charge(5000, job.Seconds)
	if job.Seconds < 1 || job.Seconds > 30 || job.Charged != want {
		t.Fatalf("cancelled after ~1 s: billed %d s, charged %d (want %d)", job.Seconds, job.Charged, want)
	}
	b, _ := c.Balance(ctx)
	if b.Available != DefaultBuyerCredit-job.Charged || b.Held != 0 {
		t.Fatalf("balance %+v", b)
	}
	if _, err := c.CancelJob(ctx, job.ID); err == nil || !strings.Contains(err.Error(), "already ended") {
		t.Fatalf("second cancel: %v", err)
	}
	// The provider is free again and runs the next job.
	next := submit(t, c, "pro", examples.Dataset, examples.Script)
	follow(t, c, next.ID)
	if next, _ = c.Job(ctx, next.ID); next.State != "completed" {
		t.Fatalf("next job after a cancel: %s %s", next.State, next.Explanation)
	}
}

// TestProviderKilledMidRun runs the job's first provider as a separate
// process and kills it with SIGKILL mid-run. The buyer notices, the
// coordinator voids that attempt once its heartbeats stop, and the job
// completes on another provider: the ledger shows one void and one
// settlement.
func TestProviderKilledMidRun(t *testing.T) {
	dir := t.TempDir()
	tn, err := Start(context.Background(), Config{Dir: dir, Providers: 2, ProviderLost: 2 * time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Close()
	c := api.NewClient(tn.Info.Buyer.API, tn.Info.Buyer.Token)
	ctx := context.Background()

	// The only Max provider, in its own process.
	child := exec.Command(os.Args[0], "-test.run", "^TestProviderKilledMidRun$")
	child.Env = append(os.Environ(), "GAAS_TEST_PROVIDER="+filepath.Join(dir, "doomed"), "GAAS_TEST_COORDINATOR="+tn.Info.Coordinator.Addrs[0])
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()

	script := []byte("import os, time\ndef main():\n    print('started', flush=True)\n    time.sleep(3)\n    open(os.environ['GAAS_OUTPUT'] + '/model.txt', 'w').write('ok')\n")
	job := submit(t, c, "max", examples.Dataset, script)
	waitForLine(t, c, job.ID, "started")
	job, _ = c.Job(ctx, job.ID)
	doomed := job.Provider
	child.Process.Signal(syscall.SIGKILL)
	child.Wait()

	// A second Max provider comes online; the job must complete there.
	rescue, err := node.Start(node.Config{DataDir: filepath.Join(dir, "rescue"), Coordinator: tn.Info.Coordinator.Addrs[0], Provider: true,
		GPU: gpu.NewSimulator(gpu.RTX4090), Heartbeat: 500 * time.Millisecond, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer rescue.Close()
	follow(t, c, job.ID)
	job, _ = c.Job(ctx, job.ID)
	if job.State != "completed" || job.Provider != rescue.ID().String() || job.Provider == doomed || job.Attempts != 2 {
		t.Fatalf("after the kill: %s on %s (killed %s, rescue %s), %d attempts: %s", job.State, job.Provider, doomed, rescue.ID(), job.Attempts, job.Explanation)
	}
	var voids, settles int
	history, _ := c.History(ctx)
	for _, e := range history {
		switch e.Kind {
		case "release":
			voids++
		case "settle":
			settles++
		}
	}
	if voids != 1 || settles != 1 {
		t.Fatalf("ledger: %d voids and %d settlements, want one of each", voids, settles)
	}
	want, _ := money.Charge(12000, job.Seconds)
	if b, _ := c.Balance(ctx); b.Available != DefaultBuyerCredit-want || b.Held != 0 || job.Charged != want {
		t.Fatalf("balance %+v, charged %d, want %d for the one completed attempt", b, job.Charged, want)
	}
	if r, err := tn.Coordinator.Ledger.Verify(); err != nil || !r.OK() {
		t.Fatalf("verify: %v %v", err, r.Problems)
	}
}

// TestMain also serves as the provider process TestProviderKilledMidRun
// kills.
func TestMain(m *testing.M) {
	if dir := os.Getenv("GAAS_TEST_IDLE_NODE"); dir != "" { // BenchmarkMatch's idle node
		if _, err := node.Start(node.Config{DataDir: dir, Coordinator: os.Getenv("GAAS_TEST_COORDINATOR"), Logger: slog.New(slog.DiscardHandler)}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("ready")
		select {}
	}
	if dir := os.Getenv("GAAS_TEST_PROVIDER"); dir != "" {
		n, err := node.Start(node.Config{DataDir: dir, Coordinator: os.Getenv("GAAS_TEST_COORDINATOR"), Provider: true,
			GPU: gpu.NewSimulator(gpu.RTX4090), Heartbeat: 500 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		<-n.ProviderReady()
		select {} // until killed
	}
	os.Exit(m.Run())
}

func TestJobPackages(t *testing.T) {
	wheels := t.TempDir()
	if _, err := testwheel.Build(wheels, "gaas-tiny", "1.2.0", map[string]string{"gaas_tiny/__init__.py": "SCALE = 3\n"}); err != nil {
		t.Fatal(err)
	}
	tn, err := Start(context.Background(), Config{Dir: t.TempDir(), Providers: 1, PipFindLinks: wheels, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Close()
	c := api.NewClient(tn.Info.Buyer.API, tn.Info.Buyer.Token)
	ctx := context.Background()
	ds, _ := c.UploadDataset(ctx, "students.csv", strings.NewReader(string(examples.Dataset)))
	sc, err := c.UploadScript(ctx, "train.py", strings.NewReader(`import os, gaas_tiny
def main():
    open(os.path.join(os.environ["GAAS_OUTPUT"], "scale.txt"), "w").write(str(gaas_tiny.SCALE))
`))
	if err != nil {
		t.Fatal(err)
	}
	good, err := c.CreateJob(ctx, api.JobSpec{Tier: "starter", Dataset: ds.CID, Script: sc.CID, Packages: []string{"gaas-tiny==1.2.0"}})
	if err != nil {
		t.Fatal(err)
	}
	follow(t, c, good.ID)
	if good, _ = c.Job(ctx, good.ID); good.State != "completed" || good.Model == nil || good.Model.Name != "scale.txt" {
		t.Fatalf("job with a package: %s %q %+v", good.State, good.Explanation, good.Model)
	}
	bad, err := c.CreateJob(ctx, api.JobSpec{Tier: "starter", Dataset: ds.CID, Script: sc.CID, Packages: []string{"gaas-missing"}})
	if err != nil {
		t.Fatal(err)
	}
	follow(t, c, bad.ID)
	bad, _ = c.Job(ctx, bad.ID)
	if bad.State != "failed" || !strings.Contains(bad.Explanation, "Installing your packages failed: No matching distribution found for gaas-missing") || bad.ChargeNote != "Not charged" {
		t.Fatalf("job with a missing package: %s %q %q", bad.State, bad.Explanation, bad.ChargeNote)
	}
}

// TestEventsResume checks that a client joining late gets the whole log,
// and one resuming after event N gets exactly what followed it.
func TestEventsResume(t *testing.T) {
	_, c := start(t, 2)
	job := submit(t, c, "starter", examples.Dataset, examples.Script)
	all := follow(t, c, job.ID)
	var logged []api.Event
	for _, ev := range all {
		if ev.Seq != 0 {
			logged = append(logged, ev)
		}
	}
	if len(logged) < 10 {
		t.Fatalf("only %d logged events", len(logged))
	}
	ctx := context.Background()
	late, err := c.Events(ctx, job.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var replay []api.Event
	for ev := range late {
		replay = append(replay, ev)
	}
	if len(replay) != len(logged) {
		t.Fatalf("late join got %d events, live got %d", len(replay), len(logged))
	}
	mid := logged[5].Seq
	resumed, _ := c.Events(ctx, job.ID, mid)
	var rest []api.Event
	for ev := range resumed {
		rest = append(rest, ev)
	}
	if len(rest) != len(logged)-6 || rest[0].Seq != mid+1 {
		t.Fatalf("resuming after %d got %d events starting at %d", mid, len(rest), rest[0].Seq)
	}
	logs, err := c.Logs(ctx, job.ID)
	if err != nil || len(logs) != len(logged) {
		t.Fatalf("logs: %d, %v", len(logs), err)
	}
}
