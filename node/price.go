package node

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/trisparc/gaas/api"
	"github.com/trisparc/gaas/money"
	"github.com/trisparc/gaas/store"
)

// Estimate prices a job before anything starts, as the price screen and
// the start button show it.
func (n *Node) Estimate(ctx context.Context, tierName string, capSeconds int64) (api.Estimate, error) {
	card, err := n.rateCard(ctx)
	if err != nil {
		return api.Estimate{}, coordinatorError(err)
	}
	tier, ok := card.Tier(tierName)
	if !ok {
		var names []string
		for _, t := range card.Tiers {
			names = append(names, t.Name)
		}
		return api.Estimate{}, api.Errorf(http.StatusBadRequest, api.CodeUnknownTier, "There is no %q tier: choose one of %s.", tierName, strings.Join(names, ", "))
	}
	if capSeconds < 1 || capSeconds > maxCap {
		return api.Estimate{}, api.Errorf(http.StatusBadRequest, api.CodeInvalidInput, "The budget cap must be between 1 second and 7 days.")
	}
	most, err := money.Charge(tier.RatePaisePerHour, capSeconds)
	if err != nil {
		return api.Estimate{}, err
	}
	e := api.Estimate{
		Tier: tier.Name, Rate: tier.RatePaisePerHour, RateDisplay: money.FormatRate(tier.RatePaisePerHour),
		CapSeconds: capSeconds, MaxCharge: max(most, 1), MaxChargeDisplay: money.Format(max(most, 1)),
		StartButton: "Start training " + money.FormatRate(tier.RatePaisePerHour),
	}
	b, err := n.coord.BalanceOf(ctx, api.AccountFrom(ctx))
	if err != nil {
		return api.Estimate{}, coordinatorError(err)
	}
	e.Available, e.EnoughFunds = b.Available, b.Available >= e.MaxCharge
	e.FailedAllowanceSeconds, e.FailedRunsCharged = b.FailedAllowanceSeconds, b.FailedAllowanceSeconds <= 0
	if e.FailedRunsCharged {
		e.FailedRunNote = "This week's free failed runs are used up: if your script fails, the time it ran is charged."
	} else {
		e.FailedRunNote = fmt.Sprintf("If your script fails, you are not charged (%s of this week's %s left).",
			time.Duration(b.FailedAllowanceSeconds)*time.Second, 2*time.Hour)
	}
	return e, nil
}

// RetryJob starts a finished job again, with any input in change put in
// place of the old one.
func (n *Node) RetryJob(ctx context.Context, id string, change api.JobSpec) (api.Job, error) {
	old, err := n.job(ctx, id)
	if err != nil {
		return api.Job{}, err
	}
	if !store.Terminal(old.State) {
		return api.Job{}, api.Errorf(http.StatusConflict, api.CodeConflict, "Job %s is still %s; cancel it before retrying.", id, old.State)
	}
	spec := api.JobSpec{Tier: old.Tier, Dataset: old.Dataset.CID, Script: old.Script.CID, Packages: old.Packages, CapSeconds: old.CapSeconds}
	if change.Tier != "" {
		spec.Tier = change.Tier
	}
	if change.Dataset != "" {
		spec.Dataset = change.Dataset
	}
	if change.Script != "" {
		spec.Script = change.Script
	}
	if change.Packages != nil {
		spec.Packages = change.Packages
	}
	if change.CapSeconds != 0 {
		spec.CapSeconds = change.CapSeconds
	}
	return n.CreateJob(ctx, spec)
}
