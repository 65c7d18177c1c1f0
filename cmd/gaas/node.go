package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/trisparc/gaas/coordinator"
	"github.com/trisparc/gaas/gpu"
	"github.com/trisparc/gaas/node"
	"github.com/trisparc/gaas/sandbox"
)

// nodeConfigFile is an optional JSON file in the data folder with the
// same settings as the flags; flags win.
type nodeConfigFile struct {
	Coordinator string   `json:"coordinator"`
	Bootstrap   []string `json:"bootstrap"`
	Listen      []string `json:"listen"`
	API         string   `json:"api"`
}

var simulatedModels = map[string]gpu.Model{"starter": gpu.RTX4060, "pro": gpu.RTX4070, "max": gpu.RTX4090}

func (c *cli) node(ctx context.Context, args []string) error {
	f := c.flags("node")
	data := f.string("data", "GAAS_DATA", defaultDataDir("gaas"), "data folder: identity key, jobs, blocks, API token")
	listen := f.list("listen", "GAAS_LISTEN", "libp2p listen address (default /ip4/0.0.0.0/tcp/4002 and /ip4/0.0.0.0/udp/4002/quic-v1)")
	apiAddr := f.string("api", "GAAS_API", "", "address for the HTTP API (default 127.0.0.1:7070)")
	coord := f.string("coordinator", "GAAS_COORDINATOR", "", "the coordinator's address, ending in /p2p/PEER_ID")
	bootstrap := f.list("bootstrap", "GAAS_BOOTSTRAP", "another DHT bootstrap peer")
	provider := f.bool("provider", "GAAS_PROVIDER", "start in provider mode: serve jobs on this machine's GPU")
	lower := f.bool("serve-lower-tiers", "GAAS_SERVE_LOWER_TIERS", "also take jobs of the tiers below the GPU's own, at their rates")
	pipIndex := f.string("pip-index-url", "GAAS_PIP_INDEX_URL", "", "package index a provider installs job packages from (default: pip's own)")
	pipLinks := f.string("pip-find-links", "GAAS_PIP_FIND_LINKS", "", "local folder of wheels a provider installs job packages from, instead of an index")
	jobMemory := f.int("job-memory-mib", "GAAS_JOB_MEMORY_MIB", 0, "memory a provider gives each job, in MiB (default 4096)")
	jobProcs := f.int("job-processes", "GAAS_JOB_PROCESSES", 0, "processes and threads a job may run at once (default 256)")
	jobDisk := f.int("job-disk-mib", "GAAS_JOB_DISK_MIB", 0, "disk a job may write, model included, in MiB (default 10240)")
	simulate := f.string("simulate-gpu", "GAAS_SIMULATE_GPU", "", "use a simulated GPU of this tier (starter, pro, max) instead of NVML: for testing only")
	if _, err := f.parse(args); err != nil {
		return err
	}
	var file nodeConfigFile
	if b, err := os.ReadFile(filepath.Join(*data, "config.json")); err == nil {
		if err := json.Unmarshal(b, &file); err != nil {
			return fmt.Errorf("%s is not valid JSON: %v", filepath.Join(*data, "config.json"), err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	cfg := node.Config{DataDir: *data, Listen: *listen, APIAddr: *apiAddr, Coordinator: *coord, Bootstrap: *bootstrap, ServeLowerTiers: *lower, PipIndexURL: *pipIndex, PipFindLinks: *pipLinks, Logger: c.logger(logWarn)}
	if *jobMemory < 0 || *jobProcs < 0 || *jobDisk < 0 {
		return usagef("node: job limits cannot be negative")
	}
	cfg.Limits = sandbox.Limits{MemoryBytes: int64(*jobMemory) << 20, Processes: int64(*jobProcs), DiskBytes: int64(*jobDisk) << 20}
	if cfg.Coordinator == "" {
		cfg.Coordinator = file.Coordinator
	}
	if len(cfg.Bootstrap) == 0 {
		cfg.Bootstrap = file.Bootstrap
	}
	if len(cfg.Listen) == 0 {
		cfg.Listen = file.Listen
	}
	if len(cfg.Listen) == 0 {
		cfg.Listen = []string{"/ip4/0.0.0.0/tcp/4002", "/ip4/0.0.0.0/udp/4002/quic-v1"}
	}
	if cfg.APIAddr == "" {
		cfg.APIAddr = file.API
	}
	if cfg.APIAddr == "" {
		cfg.APIAddr = "127.0.0.1:7070"
	}
	if cfg.Coordinator == "" {
		return usagef("node: give the coordinator's address with --coordinator (or GAAS_COORDINATOR, or \"coordinator\" in %s)", filepath.Join(*data, "config.json"))
	}
	if *simulate != "" {
		m, ok := simulatedModels[*simulate]
		if !ok {
			return usagef("node: --simulate-gpu must be starter, pro or max, not %q", *simulate)
		}
		cfg.GPU = gpu.NewSimulator(m)
	}
	n, err := node.Start(cfg)
	if err != nil {
		return err
	}
	defer n.Close()
	fmt.Fprintf(c.stdout, "GaaS node %s\n", n.ID())
	for _, a := range n.Addrs() {
		fmt.Fprintf(c.stdout, "  listening  %s\n", a)
	}
	fmt.Fprintf(c.stdout, "  API        %s (token in %s)\n", n.APIURL(), filepath.Join(*data, node.TokenFile))
	if *provider {
		// A machine that cannot provide still runs as a buyer.
		if err := n.SetProvider(true); err != nil {
			fmt.Fprintf(c.stdout, "  provider mode off: %s\n", sentence(err))
		} else {
			fmt.Fprintln(c.stdout, "  provider mode on")
		}
	}
	printPairing(ctx, c.stdout, n)
	fmt.Fprintf(c.stdout, "Use it: export GAAS_NODE=%s GAAS_TOKEN=%s\n", n.APIURL(), n.Token())
	<-ctx.Done()
	fmt.Fprintln(c.stdout, "Stopping the node.")
	return nil
}

func (c *cli) coordinator(ctx context.Context, args []string) error {
	f := c.flags("coordinator")
	data := f.string("data", "GAAS_DATA", defaultDataDir("gaas-coordinator"), "data folder: identity key and ledger")
	listen := f.list("listen", "GAAS_LISTEN", "libp2p listen address (default /ip4/0.0.0.0/tcp/4001 and /ip4/0.0.0.0/udp/4001/quic-v1)")
	rateCard := f.string("rate-card", "GAAS_RATE_CARD", "", "a JSON rate card to publish instead of the default (see README)")
	if _, err := f.parse(args); err != nil {
		return err
	}
	if len(*listen) == 0 {
		*listen = []string{"/ip4/0.0.0.0/tcp/4001", "/ip4/0.0.0.0/udp/4001/quic-v1"}
	}
	co, err := coordinator.Start(coordinator.Config{DataDir: *data, Listen: *listen, RateCardFile: *rateCard, Logger: c.logger(logInfo)})
	if err != nil {
		return err
	}
	defer co.Close()
	fmt.Fprintf(c.stdout, "GaaS coordinator %s\n", co.Peer.ID())
	for _, a := range co.Peer.Addrs() {
		fmt.Fprintf(c.stdout, "  listening  %s\n", a)
	}
	fmt.Fprintf(c.stdout, "Nodes join with: gaas node --coordinator %s\n", pickAddr(co.Peer.Addrs()))
	<-ctx.Done()
	fmt.Fprintln(c.stdout, "Stopping the coordinator.")
	return nil
}

// pickAddr prefers a TCP address: it is the one every peer can dial.
func pickAddr(addrs []string) string {
	for _, a := range addrs {
		if strings.Contains(a, "/tcp/") {
			return a
		}
	}
	if len(addrs) > 0 {
		return addrs[0]
	}
	return ""
}
