package testnet

import (
	"context"
	"testing"
	"time"

	"github.com/trisparc/gaas/examples"
	"github.com/trisparc/gaas/ledger"
	"github.com/trisparc/gaas/money"
)

// TestLedgerEndToEnd runs a completed, a failed and a cancelled job on the
// testnet, then verifies the ledger and checks every balance to the paisa
// against the rules: the completed and cancelled runs are charged for
// their seconds; the failed one costs the buyer nothing and the platform
// pays its provider.
func TestLedgerEndToEnd(t *testing.T) {
	tn, c := start(t, 3)
	ctx := context.Background()
	provider := map[string]string{}
	for _, p := range tn.Info.Providers {
		provider[p.Tier] = p.Peer
	}
	completed := submit(t, c, "pro", examples.Dataset, examples.Script)
	failing := submit(t, c, "starter", examples.Dataset, []byte("import time\ndef main():\n    time.sleep(1.2)\n    raise ValueError('diverged')\n"))
	cancelled := submit(t, c, "max", examples.Dataset, sleeper)
	waitForLine(t, c, cancelled.ID, "started")
	time.Sleep(1200 * time.Millisecond)
	if _, err := c.CancelJob(ctx, cancelled.ID); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{completed.ID, failing.ID, cancelled.ID} {
		follow(t, c, id)
	}
	completed, _ = c.Job(ctx, completed.ID)
	failing, _ = c.Job(ctx, failing.ID)
	cancelled, _ = c.Job(ctx, cancelled.ID)
	if completed.State != "completed" || failing.State != "failed" || cancelled.State != "cancelled" {
		t.Fatalf("states %s %s %s", completed.State, failing.State, cancelled.State)
	}
	for _, j := range []struct {
		seconds, charged int64
		rate             int64
	}{{completed.Seconds, completed.Charged, 5000}, {cancelled.Seconds, cancelled.Charged, 12000}} {
		if want, _ := money.Charge(j.rate, j.seconds); j.charged != want || j.seconds < 1 {
			t.Fatalf("charged %d for %d s at %d/hr, want %d", j.charged, j.seconds, j.rate, want)
		}
	}
	if failing.Charged != 0 || failing.ChargeNote != "Not charged" || failing.Seconds < 1 {
		t.Fatalf("failed job: %+v", failing)
	}

	l := tn.Coordinator.Ledger
	r, err := l.Verify()
	if err != nil || !r.OK() || r.OpenHolds != 0 {
		t.Fatalf("verify: %+v %v", r, err)
	}
	fee := func(charged int64) int64 { f, _ := money.Fee(charged, 1000); return f }
	failedCost, _ := money.Charge(3000, failing.Seconds)
	paidForFailure := failedCost - fee(failedCost)
	want := map[string]int64{
		ledger.Buyer(tn.Info.Buyer.Peer):     DefaultBuyerCredit - completed.Charged - cancelled.Charged,
		ledger.Provider(provider["pro"]):     completed.Charged - fee(completed.Charged),
		ledger.Provider(provider["starter"]): paidForFailure,
		ledger.Provider(provider["max"]):     cancelled.Charged - fee(cancelled.Charged),
		ledger.Platform:                      fee(completed.Charged) + fee(cancelled.Charged) - paidForFailure,
		ledger.External:                      -DefaultBuyerCredit,
	}
	for account, paise := range want {
		if got := l.Balance(account); got != paise {
			t.Errorf("%s = %d, want %d", account, got, paise)
		}
	}
	b, _ := c.Balance(ctx)
	if b.FailedAllowanceSeconds != 2*3600-failing.Seconds {
		t.Errorf("failed-run allowance left %d s after a %d s failure", b.FailedAllowanceSeconds, failing.Seconds)
	}
	history, err := c.History(ctx)
	if err != nil || len(history) != 7 { // credit, three holds, three resolutions
		t.Fatalf("buyer's history: %d entries, %v", len(history), err)
	}
}
