package testnet

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trisparc/gaas/api"
	"github.com/trisparc/gaas/examples"
	"github.com/trisparc/gaas/internal/metricstest"
	"github.com/trisparc/gaas/ledger"
	"github.com/trisparc/gaas/money"
	"github.com/trisparc/gaas/node"
)

func start(t *testing.T, providers int) (*Testnet, *api.Client) {
	t.Helper()
	dir := t.TempDir()
	tn, err := Start(context.Background(), Config{Dir: dir, Providers: providers, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tn.Close() })
	var info Info
	data, err := os.ReadFile(filepath.Join(dir, InfoFile))
	if err != nil {
		t.Fatalf("testnet.json: %v", err)
	}
	if err := json.Unmarshal(data, &info); err != nil {
		t.Fatal(err)
	}
	if info.Buyer.API == "" || info.Buyer.Token == "" || len(info.Providers) != providers || info.Coordinator.Peer == "" {
		t.Fatalf("testnet.json is incomplete: %s", data)
	}
	return tn, api.NewClient(info.Buyer.API, info.Buyer.Token)
}

// testLogger sends the peers' logs to the test's log, shown when it fails.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// submit uploads a dataset and script and creates a job, as the CLI does.
func submit(t *testing.T, c *api.Client, tier string, dataset, script []byte) api.Job {
	t.Helper()
	ctx := context.Background()
	ds, err := c.UploadDataset(ctx, "students.csv", bytes.NewReader(dataset))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := c.UploadScript(ctx, "train.py", bytes.NewReader(script))
	if err != nil {
		t.Fatal(err)
	}
	job, err := c.CreateJob(ctx, api.JobSpec{Tier: tier, Dataset: ds.CID, Script: sc.CID, CapSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	return job
}

// follow reads the job's live events until it ends and returns them.
func follow(t *testing.T, c *api.Client, id string) []api.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ch, err := c.Events(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	var evs []api.Event
	for ev := range ch {
		evs = append(evs, ev)
	}
	if ctx.Err() != nil {
		t.Fatalf("job %s did not end in time; events: %+v", id, evs)
	}
	return evs
}

func TestJobEndToEnd(t *testing.T) {
	tn, c := start(t, 3)
	ctx := context.Background()
	before, err := c.Balance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if before.Available != DefaultBuyerCredit {
		t.Fatalf("buyer starts with %d paise", before.Available)
	}

	job := submit(t, c, "pro", examples.Dataset, examples.Script)
	if job.State != "queued" || job.RateDisplay != "₹50/hr" || job.MaxCharge != 833 { // 600 s at ₹50/hr
		t.Fatalf("new job %+v", job)
	}
	evs := follow(t, c, job.ID)
	var states, output []string
	for _, ev := range evs {
		switch ev.Kind {
		case api.EventState:
			states = append(states, ev.State)
		case api.EventLog:
			output = append(output, ev.Line)
		}
	}
	if strings.Join(states, ",") != "queued,running,completed" {
		t.Fatalf("states %v; events %+v", states, evs)
	}
	if !strings.Contains(strings.Join(output, "\n"), "test accuracy") {
		t.Fatalf("script output missing: %v", output)
	}

	job, err = c.Job(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	var proPeer string
	for _, p := range tn.Info.Providers {
		if p.Tier == "pro" {
			proPeer = p.Peer
		}
	}
	if job.Provider != proPeer || !job.Simulated || !strings.Contains(job.GPU, "simulated") {
		t.Fatalf("ran on %s (%s), want the pro provider %s", job.Provider, job.GPU, proPeer)
	}
	if job.Model == nil || job.Model.Name != "model.json" || !strings.HasPrefix(job.Model.CID, "bafk") {
		t.Fatalf("model %+v", job.Model)
	}
	m, err := c.Model(ctx, job.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(m.Body)
	m.Body.Close()
	var model struct {
		Features []string
		Weights  []float64
		Accuracy float64 `json:"test_accuracy"`
	}
	if err := json.Unmarshal(body, &model); err != nil || int64(len(body)) != job.Model.Size || m.CID != job.Model.CID {
		t.Fatalf("downloaded model (%d bytes, %v, cid %s): %s", len(body), err, m.CID, body)
	}
	if len(model.Weights) != 3 || model.Accuracy < 0.85 {
		t.Fatalf("model did not train: %+v", model)
	}
	req, _ := http.NewRequest("GET", tn.Info.Buyer.API+"/api/jobs/"+job.ID+"/model", nil)
	req.Header.Set("Authorization", "Bearer "+tn.Info.Buyer.Token)
	req.Header.Set("Range", "bytes=2-11")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	part, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(part, body[2:12]) {
		t.Fatalf("range request: %s, %q", resp.Status, part)
	}

	// The ledger, to the paisa.
	if !job.Settled || job.Seconds < 1 {
		t.Fatalf("not settled: %+v", job)
	}
	want, _ := money.Charge(5000, job.Seconds)
	if job.Charged != want {
		t.Fatalf("charged %d for %d s, want %d", job.Charged, job.Seconds, want)
	}
	fee, _ := money.Fee(job.Charged, 1000)
	after, _ := c.Balance(ctx)
	if after.Available != before.Available-job.Charged || after.Held != 0 {
		t.Fatalf("balance %+v after a charge of %d", after, job.Charged)
	}
	l := tn.Coordinator.Ledger
	if got := l.Balance(ledger.Provider(proPeer)); got != job.Charged-fee {
		t.Fatalf("provider earned %d, want %d", got, job.Charged-fee)
	}
	if got := l.Balance(ledger.Platform); got != fee {
		t.Fatalf("platform fee %d, want %d", got, fee)
	}

	// What the buyer's and the provider's metrics say of it.
	var text bytes.Buffer
	if err := c.WriteMetrics(ctx, &text); err != nil {
		t.Fatal(err)
	}
	bm := metricstest.Parse(text.String())
	var pro *node.Node
	for _, p := range tn.Providers {
		if p.ID().String() == proPeer {
			pro = p
		}
	}
	text.Reset()
	if err := api.NewClient(pro.APIURL(), pro.Token()).WriteMetrics(ctx, &text); err != nil {
		t.Fatal(err)
	}
	pm := metricstest.Parse(text.String())
	for _, check := range []struct {
		who   string
		m     map[string]float64
		name  string
		least float64
		most  float64
	}{
		{"buyer", bm, `gaas_jobs{state="completed"}`, 1, 1},
		{"buyer", bm, `gaas_jobs{state="running"}`, 0, 0},
		{"buyer", bm, `gaas_match_seconds_count`, 1, 1},
		{"buyer", bm, `gaas_api_bytes_total{direction="upload"}`, float64(len(examples.Dataset) + len(examples.Script)), 1e9},
		{"buyer", bm, `gaas_api_bytes_total{direction="download"}`, float64(len(body) + 10), 1e9},
		{"buyer", bm, `gaas_block_bytes_total{direction="received"}`, float64(len(body)), 1e9},
		{"provider", pm, `gaas_provider_online`, 1, 1},
		{"provider", pm, `gaas_sandbox_runs_total{outcome="completed"}`, 1, 1},
		{"provider", pm, `gaas_sandbox_failures_total{stage="run"}`, 0, 0},
		{"provider", pm, `gaas_block_bytes_total{direction="received"}`, float64(len(examples.Dataset) + len(examples.Script)), 1e9},
		{"provider", pm, `gaas_block_bytes_total{direction="sent"}`, float64(len(body)), 1e9},
	} {
		if got, ok := check.m[check.name]; !ok || got < check.least || got > check.most {
			t.Errorf("%s's %s = %v (present %v), want %v to %v", check.who, check.name, got, ok, check.least, check.most)
		}
	}
}

func TestFailedJobIsNotCharged(t *testing.T) {
	_, c := start(t, 1) // one provider: starter
	ctx := context.Background()
	script := []byte(`import csv, os
def main():
    rows = list(csv.DictReader(open(os.environ["GAAS_DATASET"])))
    print("rows", len(rows))
    labels = [r["label"] for r in rows]
`)
	job := submit(t, c, "starter", examples.Dataset, script)
	follow(t, c, job.ID)
	job, err := c.Job(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if job.State != "failed" {
		t.Fatalf("state %s", job.State)
	}
	want := "Your script asked for a column named 'label', but the dataset's columns are: hours_studied, attendance_pct, prior_score, passed."
	if job.Explanation != want {
		t.Fatalf("explanation %q", job.Explanation)
	}
	if !strings.HasPrefix(job.Traceback, "Traceback (most recent call last):") || !strings.Contains(job.Traceback, "KeyError: 'label'") {
		t.Fatalf("traceback %q", job.Traceback)
	}
	if job.ChargeNote != "Not charged" || job.Charged != 0 {
		t.Fatalf("charge %d %q", job.Charged, job.ChargeNote)
	}
	b, _ := c.Balance(ctx)
	if b.Available != DefaultBuyerCredit || b.Held != 0 {
		t.Fatalf("balance after a failed job %+v", b)
	}
}
