package testnet

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trisparc/gaas/api"
	"github.com/trisparc/gaas/examples"
	"github.com/trisparc/gaas/gpu"
	"github.com/trisparc/gaas/ledger"
	"github.com/trisparc/gaas/node"
	"github.com/trisparc/gaas/p2p"
	"github.com/trisparc/gaas/protocol"
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

// TestSpamDoesNotStopARealJob: a peer floods the tier's topic with
// malformed, forged and stale messages and a storm of validly signed
// requests of its own; a real buyer's job still matches and completes.
func TestSpamDoesNotStopARealJob(t *testing.T) {
	tn, c := start(t, 1)
	key, err := p2p.LoadIdentity(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	info, _ := p2p.ParseAddrs(tn.Info.Coordinator.Addrs[:1])
	spammer, err := p2p.Start(p2p.Config{Key: key, Bootstrap: info})
	if err != nil {
		t.Fatal(err)
	}
	defer spammer.Close()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	if err := spammer.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range tn.Info.Providers {
		ai, _ := p2p.ParseAddrs(p.Addrs[:1])
		spammer.Host.Connect(ctx, ai[0])
	}
	topic, err := spammer.PubSub.Join(protocol.JobTopic("starter"))
	if err != nil {
		t.Fatal(err)
	}
	otherKey, _ := p2p.LoadIdentity(t.TempDir())
	var sent atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			var data []byte
			switch i % 4 {
			case 0:
				data = []byte(fmt.Sprintf("garbage %d", i))
			case 1: // signed by someone else
				env, _ := protocol.Seal(otherKey, &protocol.JobRequest{JobID: fmt.Sprintf("x%d", i), Tier: "starter", CapSeconds: 60, Buyer: "someone", IssuedAt: time.Now().UnixMilli()})
				data, _ = protocol.Marshal(env)
			case 2: // stale
				env, _ := protocol.Seal(key, &protocol.JobRequest{JobID: fmt.Sprintf("s%d", i), Tier: "starter", CapSeconds: 60, Buyer: spammer.ID().String(), IssuedAt: time.Now().Add(-time.Hour).UnixMilli()})
				data, _ = protocol.Marshal(env)
			default: // valid, for jobs that do not exist, far over the rate
				env, _ := protocol.Seal(key, &protocol.JobRequest{JobID: fmt.Sprintf("v%d", i), Tier: "starter", CapSeconds: 60, Buyer: spammer.ID().String(), BuyerAddrs: spammer.Addrs(), IssuedAt: time.Now().UnixMilli()})
				data, _ = protocol.Marshal(env)
			}
			if topic.Publish(ctx, data) == nil {
				sent.Add(1)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	time.Sleep(500 * time.Millisecond) // the flood is on
	job := submit(t, c, "starter", examples.Dataset, examples.Script)
	follow(t, c, job.ID)
	stop()
	<-done
	job, _ = c.Job(context.Background(), job.ID)
	if job.State != "completed" {
		t.Fatalf("a real job under spam: %s: %s", job.State, job.Explanation)
	}
	t.Logf("the spammer published %d messages; the real job completed", sent.Load())
}

// TestServeLowerTiers: a Max card whose owner lets it serve lower tiers
// takes a Starter job, at the Starter rate.
func TestServeLowerTiers(t *testing.T) {
	tn, c := start(t, 1)               // one Starter provider...
	tn.Providers[0].SetProvider(false) // ...that goes offline
	big, err := node.Start(node.Config{DataDir: t.TempDir(), Coordinator: tn.Info.Coordinator.Addrs[0], Provider: true,
		ServeLowerTiers: true, GPU: gpu.NewSimulator(gpu.RTX4090), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	<-big.ProviderReady()
	job := submit(t, c, "starter", examples.Dataset, examples.Script)
	follow(t, c, job.ID)
	job, _ = c.Job(context.Background(), job.ID)
	if job.State != "completed" || job.Provider != big.ID().String() || job.Rate != 3000 || !strings.Contains(job.GPU, "4090") {
		t.Fatalf("starter job: %s on %s (%s) at %d", job.State, job.Provider, job.GPU, job.Rate)
	}
}
