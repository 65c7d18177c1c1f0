package testnet

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trisparc/gaas/api"
	"github.com/trisparc/gaas/examples"
)

func percentile(xs []float64, p float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// BenchmarkMatch measures, on a 20-provider testnet, the time from
// submitting a job to its script's main() starting on a provider (inputs
// are a few kilobytes, so transfer is negligible), with the DHT lookup,
// the gossipsub round trip (request to first offer) and the confirm shown
// separately; and the resident memory of one idle node.
func BenchmarkMatch(b *testing.B) {
	dir := b.TempDir()
	tn, err := Start(context.Background(), Config{Dir: dir, Providers: 20, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer tn.Close()
	c := api.NewClient(tn.Info.Buyer.API, tn.Info.Buyer.Token)
	ctx := context.Background()
	ds, _ := c.UploadDataset(ctx, "students.csv", bytes.NewReader(examples.Dataset))
	sc, err := c.UploadScript(ctx, "start.py", strings.NewReader("import os, time\ndef main():\n    print('main', time.time_ns(), flush=True)\n    open(os.environ['GAAS_OUTPUT'] + '/m', 'w').write('x')\n"))
	if err != nil {
		b.Fatal(err)
	}
	var total, lookup, offer, confirm []float64
	tiers := []string{"starter", "pro", "max"}
	b.ResetTimer()
	for i := 0; i < max(b.N, 20); i++ {
		submitted := time.Now()
		job, err := c.CreateJob(ctx, api.JobSpec{Tier: tiers[i%3], Dataset: ds.CID, Script: sc.CID, CapSeconds: 60})
		if err != nil {
			b.Fatal(err)
		}
		events, _ := c.Events(ctx, job.ID, 0)
		for ev := range events {
			if f := strings.Fields(ev.Line); ev.Kind == api.EventLog && len(f) == 2 && f[0] == "main" {
				ns, _ := strconv.ParseInt(f[1], 10, 64)
				total = append(total, float64(time.Unix(0, ns).Sub(submitted).Microseconds())/1000)
			}
		}
		job, _ = c.Job(ctx, job.ID)
		if job.State != "completed" || job.Match == nil {
			b.Fatalf("job %s: %s: %s", job.ID, job.State, job.Explanation)
		}
		lookup = append(lookup, float64(job.Match.LookupMs))
		offer = append(offer, float64(job.Match.OfferMs))
		confirm = append(confirm, float64(job.Match.ConfirmMs))
	}
	b.StopTimer()
	b.ReportMetric(percentile(total, 0.5), "submit-to-main-p50-ms")
	b.ReportMetric(percentile(total, 0.95), "submit-to-main-p95-ms")
	b.ReportMetric(percentile(lookup, 0.5), "dht-lookup-p50-ms")
	b.ReportMetric(percentile(offer, 0.5), "gossip-offer-p50-ms")
	b.ReportMetric(percentile(confirm, 0.5), "confirm-p50-ms")
	b.ReportMetric(idleNodeRSS(b, tn.Info.Coordinator.Addrs[0], filepath.Join(dir, "idle")), "idle-node-RSS-MB")
}

// idleNodeRSS starts a buyer node in a process of its own, lets it settle
// and reads its resident memory.
func idleNodeRSS(b *testing.B, coordinator, dir string) float64 {
	cmd := exec.Command(os.Args[0], "-test.run", "^$", "-test.bench", "^$")
	cmd.Env = append(os.Environ(), "GAAS_TEST_IDLE_NODE="+dir, "GAAS_TEST_COORDINATOR="+coordinator)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		b.Fatalf("idle node: %q", line)
	}
	time.Sleep(3 * time.Second)
	status, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(status), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}
