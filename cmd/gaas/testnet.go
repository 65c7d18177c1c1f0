package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/trisparc/gaas/testnet"
)

func (c *cli) testnet(ctx context.Context, args []string) error {
	f := c.flags("testnet")
	dir := f.string("dir", "GAAS_TESTNET_DIR", ".testnet", "folder for every peer's data and testnet.json")
	providers := f.int("providers", "GAAS_PROVIDERS", 3, "number of providers; they cycle through the tiers starter, pro, max")
	buyers := f.int("buyers", "GAAS_BUYERS", 1, "number of buyer nodes, each with its own API and ₹1,000")
	if _, err := f.parse(args); err != nil {
		return err
	}
	if *providers < 1 || *providers > 64 {
		return usagef("testnet: --providers must be between 1 and 64, not %d", *providers)
	}
	if *buyers < 1 || *buyers > 64 {
		return usagef("testnet: --buyers must be between 1 and 64, not %d", *buyers)
	}
	tn, err := testnet.Start(ctx, testnet.Config{Dir: *dir, Providers: *providers, Buyers: *buyers, Logger: c.logger(logWarn)})
	if err != nil {
		return err
	}
	defer tn.Close()
	printTestnet(c.stdout, tn.Info, *dir)
	fmt.Fprintln(c.stdout, "Running until interrupted (Ctrl-C).")
	<-ctx.Done()
	fmt.Fprintln(c.stdout, "Stopping every peer.")
	return nil
}

func printTestnet(w io.Writer, info testnet.Info, dir string) {
	fmt.Fprintf(w, "GaaS testnet on 127.0.0.1 (%s)\n", filepath.Join(dir, testnet.InfoFile))
	fmt.Fprintf(w, "  coordinator  %s\n               %s\n", info.Coordinator.Peer, pickAddr(info.Coordinator.Addrs))
	for _, p := range info.Providers {
		fmt.Fprintf(w, "  provider     %s  %-7s  %s\n", p.Peer, p.Tier, p.GPU)
	}
	for _, b := range info.Buyers {
		fmt.Fprintf(w, "  buyer        %s\n               API %s\n", b.Peer, b.API)
	}
	fmt.Fprintf(w, "Use the buyer: export GAAS_NODE=%s GAAS_TOKEN=%s\n", info.Buyer.API, info.Buyer.Token)
	fmt.Fprintf(w, "Operate the ledger: export GAAS_COORDINATOR=%s GAAS_OPERATOR_KEY=%s\n", pickAddr(info.Coordinator.Addrs), info.Operator.KeyFile)
}
