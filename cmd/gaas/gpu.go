package main

import (
	"context"
	"fmt"

	"github.com/trisparc/gaas/coordinator"
	"github.com/trisparc/gaas/gpu"
)

func (c *cli) gpu(ctx context.Context, args []string) error {
	f := c.flags("gpu")
	if _, err := f.parse(args); err != nil {
		return err
	}
	r, err := gpu.Detect()
	if err != nil {
		fmt.Fprintf(c.stdout, "%v.\n", err)
		return &exitError{code: 1}
	}
	defer r.Close()
	gpus, err := r.GPUs()
	if err != nil {
		return err
	}
	card := coordinator.DefaultRateCard()
	for _, g := range gpus {
		fan := fmt.Sprintf("%d%%", g.FanPercent)
		if g.FanPercent < 0 {
			fan = "no fan"
		}
		fmt.Fprintf(c.stdout, "GPU %d  %s\n  VRAM     %d MiB (%d MiB used)\n  driver   %s, CUDA %s, compute %s\n  now      %d°C, fan %s, %d%% busy, %d W\n",
			g.Index, g.Label(), g.VRAMTotalMiB, g.VRAMUsedMiB, g.Driver, g.CUDA, g.Compute, g.TempC, fan, g.UtilPercent, g.PowerWatts)
		if t, ok := card.TierFor(g.VRAMTotalMiB); ok {
			fmt.Fprintf(c.stdout, "  tier     %s (%s) on the default rate card\n", t.Title, t.Class)
		} else {
			fmt.Fprintln(c.stdout, "  tier     none: below the smallest tier's memory")
		}
	}
	return nil
}
