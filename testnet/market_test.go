package testnet

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/trisparc/gaas/api"
	"github.com/trisparc/gaas/examples"
	"github.com/trisparc/gaas/ledger"
)

// TestMarketUnderLoad: 10 providers across the three tiers and 5 buyers
// submitting 30 jobs at once. Every job completes exactly once, on a
// provider of its tier; no provider runs two jobs at once.
func TestMarketUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("30 jobs on 10 providers")
	}
	tn, err := Start(context.Background(), Config{Dir: t.TempDir(), Providers: 10, Buyers: 5, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Close()
	tierOf := map[string]string{}
	for _, p := range tn.Info.Providers {
		tierOf[p.Peer] = p.Tier
	}
	script := []byte("import os, time\ndef main():\n    time.sleep(0.3)\n    open(os.environ['GAAS_OUTPUT'] + '/model.txt', 'w').write('ok')\n")
	tiers := []string{"starter", "pro", "max"}
	type result struct {
		job api.Job
		err error
	}
	results := make(chan result, 30)
	var wg sync.WaitGroup
	start := time.Now()
	for b, info := range tn.Info.Buyers {
		c := api.NewClient(info.API, info.Token)
		for j := 0; j < 6; j++ {
			wg.Add(1)
			go func(tier string) {
				defer wg.Done()
				job := submit(t, c, tier, examples.Dataset, script)
				follow(t, c, job.ID)
				job, err := c.Job(context.Background(), job.ID)
				results <- result{job, err}
			}(tiers[(b+j)%3])
		}
	}
	wg.Wait()
	close(results)
	elapsed := time.Since(start)
	perTier := map[string]int{}
	for r := range results {
		j := r.job
		if r.err != nil || j.State != "completed" || j.Attempts != 1 || j.Model == nil {
			t.Fatalf("job %s: %s after %d attempts (%v): %s", j.ID, j.State, j.Attempts, r.err, j.Explanation)
		}
		if tierOf[j.Provider] != j.Tier {
			t.Fatalf("job %s of tier %s ran on a %s provider", j.ID, j.Tier, tierOf[j.Provider])
		}
		perTier[j.Tier]++
	}
	if perTier["starter"]+perTier["pro"]+perTier["max"] != 30 {
		t.Fatalf("jobs per tier %v", perTier)
	}

	// From the coordinator's side: one metered run per job, and no
	// provider's runs overlap.
	holds, err := tn.Coordinator.Ledger.Holds()
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string][]ledger.Hold{}
	for _, h := range holds {
		if h.State != ledger.Settled || h.StartedAt == 0 {
			t.Fatalf("hold %s is %s", h.Job, h.State)
		}
		runs[h.Provider] = append(runs[h.Provider], h)
	}
	if len(holds) != 30 {
		t.Fatalf("%d holds for 30 jobs", len(holds))
	}
	busiest := 0
	for p, rs := range runs {
		sort.Slice(rs, func(i, j int) bool { return rs[i].StartedAt < rs[j].StartedAt })
		for i := 1; i < len(rs); i++ {
			if rs[i].StartedAt < rs[i-1].EndedAt {
				t.Fatalf("provider %s ran %s and %s at once", p, rs[i-1].Job, rs[i].Job)
			}
		}
		busiest = max(busiest, len(rs))
	}
	if r, err := tn.Coordinator.Ledger.Verify(); err != nil || !r.OK() {
		t.Fatalf("verify: %v %v", err, r.Problems)
	}
	t.Logf("30 jobs from 5 buyers on 10 providers in %s; %d providers used, the busiest ran %d; per tier %v",
		elapsed.Round(100*time.Millisecond), len(runs), busiest, perTier)
}
