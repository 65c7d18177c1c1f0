package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/trisparc/gaas/api"
	"github.com/trisparc/gaas/examples"
	"github.com/trisparc/gaas/ledger"
	"github.com/trisparc/gaas/money"
	"github.com/trisparc/gaas/testnet"
)

func (c *cli) demo(ctx context.Context, args []string) error {
	f := c.flags("demo")
	dir := f.string("dir", "GAAS_DEMO_DIR", "", "folder for the testnet and the model (default: a new temporary folder)")
	tier := f.String("tier", "pro", "tier to run the example on")
	if _, err := f.parse(args); err != nil {
		return err
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "gaas-demo-")
		if err != nil {
			return err
		}
		*dir = d
	}
	start := time.Now()
	fmt.Fprintln(c.stdout, "Starting a local GaaS market: one coordinator, three providers with simulated GPUs, one buyer.")
	tn, err := testnet.Start(ctx, testnet.Config{Dir: filepath.Join(*dir, "testnet"), Logger: c.logger(logWarn)})
	if err != nil {
		return err
	}
	defer tn.Close()
	printTestnet(c.stdout, tn.Info, filepath.Join(*dir, "testnet"))

	client := api.NewClient(tn.Info.Buyer.API, tn.Info.Buyer.Token)
	before, err := client.Balance(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "\nBuyer's balance: %s\n\nSubmitting the example job (%s, %s) to the %s tier:\n", before.AvailableDisplay, examples.ScriptName, examples.DatasetName, *tier)
	out := filepath.Join(*dir, "model")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	job, err := c.submitAndFollow(ctx, client, submission{
		tier: *tier, datasetName: examples.DatasetName, dataset: bytes.NewReader(examples.Dataset), datasetSize: int64(len(examples.Dataset)),
		scriptName: examples.ScriptName, script: bytes.NewReader(examples.Script), scriptSize: int64(len(examples.Script)), capSeconds: 600, out: out, yes: true,
	})
	if err != nil {
		return err
	}
	if job.State != "completed" {
		return errors.New("the demo job did not complete")
	}
	if !job.Settled {
		return errors.New("the demo job completed but the coordinator has not settled its charge")
	}
	after, err := client.Balance(ctx)
	if err != nil {
		return err
	}
	l := tn.Coordinator.Ledger
	fmt.Fprintf(c.stdout, "\nSettlement at the coordinator (metered %s at %s):\n", formatDuration(job.Seconds), job.RateDisplay)
	fmt.Fprintf(c.stdout, "  buyer paid         %s  (balance %s -> %s)\n", money.Format(job.Charged), before.AvailableDisplay, after.AvailableDisplay)
	fmt.Fprintf(c.stdout, "  provider earned    %s\n", money.Format(l.Balance(ledger.Provider(job.Provider))))
	fmt.Fprintf(c.stdout, "  platform fee       %s\n", money.Format(l.Balance(ledger.Platform)))
	if after.Available != before.Available-job.Charged || after.Held != 0 {
		return fmt.Errorf("the buyer's balance does not add up: %s before, %s charged, %s after", before.AvailableDisplay, money.Format(job.Charged), after.AvailableDisplay)
	}
	fmt.Fprintf(c.stdout, "\nDemo complete in %s. The model is in %s\n", time.Since(start).Round(100*time.Millisecond), out)
	return nil
}
