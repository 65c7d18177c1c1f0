package testnet

import (
	"archive/zip"
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/trisparc/gaas/api"
	"github.com/trisparc/gaas/examples"
)

func TestEstimateRetryAndFolderModels(t *testing.T) {
	_, c := start(t, 1)
	ctx := context.Background()
	e, err := c.Estimate(ctx, "starter", 1800)
	if err != nil {
		t.Fatal(err)
	}
	if e.StartButton != "Start training ₹30/hr" || e.MaxChargeDisplay != "₹15" || !e.EnoughFunds || e.FailedRunsCharged {
		t.Fatalf("estimate %+v", e)
	}
	if _, err := c.Estimate(ctx, "ultra", 60); err == nil || !strings.Contains(err.Error(), `no "ultra" tier`) {
		t.Fatalf("unknown tier: %v", err)
	}

	// A job that fails, then the same job with the script edited.
	broken := submit(t, c, "starter", examples.Dataset, []byte("import csv, os\ndef main():\n    rows = list(csv.DictReader(open(os.environ['GAAS_DATASET'])))\n    rows[0]['label']\n"))
	follow(t, c, broken.ID)
	fixed, err := c.UploadScript(ctx, "train.py", strings.NewReader(`import os
def main():
    out = os.environ["GAAS_OUTPUT"]
    os.makedirs(out + "/weights")
    open(out + "/config.json", "w").write("{}")
    open(out + "/weights/layer0.bin", "wb").write(b"\x00" * 64)
`))
	if err != nil {
		t.Fatal(err)
	}
	retry, err := c.RetryJob(ctx, broken.ID, api.JobSpec{Script: fixed.CID})
	if err != nil {
		t.Fatal(err)
	}
	if retry.ID == broken.ID || retry.Dataset.CID != broken.Dataset.CID || retry.Script.CID != fixed.CID || retry.Tier != "starter" {
		t.Fatalf("edit and retry: %+v", retry)
	}
	if _, err := c.RetryJob(ctx, retry.ID, api.JobSpec{}); err == nil || !strings.Contains(err.Error(), "still") {
		t.Fatalf("retrying a job that has not ended: %v", err)
	}
	follow(t, c, retry.ID)
	retry, _ = c.Job(ctx, retry.ID)
	if retry.State != "completed" || retry.Model == nil || !retry.Model.Dir {
		t.Fatalf("retried job: %s %+v", retry.State, retry.Model)
	}
	m, err := c.Model(ctx, retry.ID, "zip")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(m.Body)
	m.Body.Close()
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil || !strings.HasSuffix(m.Name, ".zip") {
		t.Fatalf("zip %s: %v", m.Name, err)
	}
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	if got := strings.Join(names, ","); got != "config.json,weights/,weights/layer0.bin" {
		t.Fatalf("zip holds %s", got)
	}
	m, err = c.Model(ctx, retry.ID, "")
	if err != nil || !strings.HasSuffix(m.Name, ".tar.gz") || m.ContentType != "application/gzip" {
		t.Fatalf("default folder download: %+v %v", m, err)
	}
	m.Body.Close()
}

// TestLastEventID reconnects to a job's event stream the way a browser's
// EventSource does, with the Last-Event-ID header.
func TestLastEventID(t *testing.T) {
	tn, c := start(t, 1)
	job := submit(t, c, "starter", examples.Dataset, examples.Script)
	all := follow(t, c, job.ID)
	req, _ := http.NewRequest("GET", tn.Info.Buyer.API+"/api/jobs/"+job.ID+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+tn.Info.Buyer.Token)
	req.Header.Set("Last-Event-ID", "3")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("content type %q", resp.Header.Get("Content-Type"))
	}
	body, _ := io.ReadAll(resp.Body) // the stream ends with the job's final state
	var ids []string
	for _, line := range strings.Split(string(body), "\n") {
		if id, ok := strings.CutPrefix(line, "id: "); ok {
			ids = append(ids, id)
		}
	}
	logged := 0
	for _, ev := range all {
		if ev.Seq != 0 {
			logged++
		}
	}
	if len(ids) != logged-3 || ids[0] != "4" {
		t.Fatalf("after Last-Event-ID 3: ids %v, want %d starting at 4", ids, logged-3)
	}
}
