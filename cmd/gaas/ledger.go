package main

import (
	"context"
	"encoding/json"
	"fmt"
)

func (c *cli) ledger(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "balance" {
		c.help([]string{"ledger"})
		if len(args) == 0 {
			return usagef("ledger: say what to do: balance")
		}
		return usagef("ledger: unknown subcommand %q", args[0])
	}
	f := c.flags("ledger balance")
	cf := f.client()
	asJSON := f.Bool("json", false, "print JSON")
	if _, err := f.parse(args[1:]); err != nil {
		return err
	}
	b, err := cf.client().Balance(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(c.stdout).Encode(b)
	}
	fmt.Fprintf(c.stdout, "Available  %s\nHeld       %s (for jobs in progress)\nEarned     %s (as a provider)\n", b.AvailableDisplay, b.HeldDisplay, b.EarnedDisplay)
	return nil
}
