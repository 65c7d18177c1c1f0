// Package testnet starts the whole market on one machine: a coordinator,
// providers with simulated GPUs (one per tier by default), and a buyer
// node, all real libp2p peers on 127.0.0.1.
package testnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/trisparc/gaas/coordinator"
	"github.com/trisparc/gaas/gpu"
	"github.com/trisparc/gaas/ledger"
	"github.com/trisparc/gaas/node"
	"github.com/trisparc/gaas/p2p"

	"github.com/libp2p/go-libp2p/core/peer"
)

// InfoFile is written into the testnet's folder once every peer is ready.
const InfoFile = "testnet.json"

// DefaultBuyerCredit is the balance the buyer starts with: ₹1,000.
const DefaultBuyerCredit = 100000

// Config says what to start.
type Config struct {
	Dir         string // every peer gets a folder inside it
	Providers   int    // zero means three, one per tier
	Buyers      int    // zero means one
	BuyerCredit int64  // paise; zero means DefaultBuyerCredit
	// PipFindLinks is a folder of wheels the providers install job
	// packages from; empty means pip's default index.
	PipFindLinks string
	// ProviderLost is how soon the coordinator gives up on a provider
	// whose heartbeats stopped; zero means the coordinator's default. The
	// providers then send heartbeats four times as often.
	ProviderLost time.Duration
	Logger       *slog.Logger
}

// PeerInfo is one peer in testnet.json.
type PeerInfo struct {
	Peer  string   `json:"peer"`
	Addrs []string `json:"addrs"`
	Data  string   `json:"data"`
}

// ProviderInfo is a provider in testnet.json.
type ProviderInfo struct {
	PeerInfo
	Tier string `json:"tier"`
	GPU  string `json:"gpu"`
	API  string `json:"api"`
}

// BuyerInfo is the buyer in testnet.json: where its API is and its token.
type BuyerInfo struct {
	PeerInfo
	API   string `json:"api"`
	Token string `json:"token"`
}

// OperatorInfo is the key that may credit accounts and verify the
// ledger (gaas ledger credit / verify --operator-key).
type OperatorInfo struct {
	Peer    string `json:"peer"`
	KeyFile string `json:"key_file"`
}

// Info is what testnet.json holds.
type Info struct {
	Coordinator PeerInfo       `json:"coordinator"`
	Operator    OperatorInfo   `json:"operator"`
	Providers   []ProviderInfo `json:"providers"`
	Buyer       BuyerInfo      `json:"buyer"`  // the first buyer
	Buyers      []BuyerInfo    `json:"buyers"` // every buyer
}

// Testnet is a running local market.
type Testnet struct {
	Coordinator *coordinator.Coordinator
	Providers   []*node.Node
	Buyer       *node.Node // the first of Buyers
	Buyers      []*node.Node
	Info        Info
}

var models = []gpu.Model{gpu.RTX4060, gpu.RTX4070, gpu.RTX4090}

// Start starts every peer, waits until each provider has advertised its
// tier, credits the buyer, and writes testnet.json.
func Start(ctx context.Context, cfg Config) (*Testnet, error) {
	if cfg.Providers == 0 {
		cfg.Providers = 3
	}
	if cfg.Providers < 0 || cfg.Providers > 64 {
		return nil, fmt.Errorf("--providers must be between 1 and 64, not %d", cfg.Providers)
	}
	if cfg.BuyerCredit == 0 {
		cfg.BuyerCredit = DefaultBuyerCredit
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the testnet folder: %w", err)
	}
	os.Remove(filepath.Join(cfg.Dir, InfoFile)) // only a ready testnet has one
	t := &Testnet{}
	fail := func(err error) (*Testnet, error) {
		t.Close()
		return nil, err
	}
	opDir := filepath.Join(cfg.Dir, "operator")
	if err := os.MkdirAll(opDir, 0o700); err != nil {
		return fail(err)
	}
	opKey, err := p2p.LoadIdentity(opDir)
	if err != nil {
		return fail(err)
	}
	opID, _ := peer.IDFromPrivateKey(opKey)
	t.Info.Operator = OperatorInfo{Peer: opID.String(), KeyFile: filepath.Join(opDir, p2p.IdentityFile)}
	c, err := coordinator.Start(coordinator.Config{DataDir: filepath.Join(cfg.Dir, "coordinator"), Operators: []peer.ID{opID}, ProviderLost: cfg.ProviderLost, Logger: log})
	if err != nil {
		return fail(fmt.Errorf("starting the coordinator: %w", err))
	}
	t.Coordinator = c
	t.Info.Coordinator = PeerInfo{Peer: c.Peer.ID().String(), Addrs: c.Peer.Addrs(), Data: filepath.Join(cfg.Dir, "coordinator")}
	coordAddr := c.Peer.Addrs()[0]

	for i := 0; i < cfg.Providers; i++ {
		dir := filepath.Join(cfg.Dir, fmt.Sprintf("provider-%d", i+1))
		sim := gpu.NewSimulator(models[i%len(models)])
		p, err := node.Start(node.Config{DataDir: dir, Coordinator: coordAddr, Provider: true, GPU: sim, PipFindLinks: cfg.PipFindLinks, Heartbeat: cfg.ProviderLost / 4, Logger: log})
		if err != nil {
			return fail(fmt.Errorf("starting provider %d: %w", i+1, err))
		}
		t.Providers = append(t.Providers, p)
		gpus, _ := sim.GPUs()
		tier, _ := c.RateCard().TierFor(gpus[0].VRAMTotalMiB)
		t.Info.Providers = append(t.Info.Providers, ProviderInfo{
			PeerInfo: PeerInfo{Peer: p.ID().String(), Addrs: p.Addrs(), Data: dir},
			Tier:     tier.Name, GPU: gpus[0].Label(), API: p.APIURL(),
		})
	}
	for i := 0; i < max(cfg.Buyers, 1); i++ {
		buyerDir := filepath.Join(cfg.Dir, "buyer")
		if i > 0 {
			buyerDir = fmt.Sprintf("%s-%d", buyerDir, i+1)
		}
		b, err := node.Start(node.Config{DataDir: buyerDir, Coordinator: coordAddr, Logger: log})
		if err != nil {
			return fail(fmt.Errorf("starting a buyer: %w", err))
		}
		t.Buyers = append(t.Buyers, b)
		info := BuyerInfo{PeerInfo: PeerInfo{Peer: b.ID().String(), Addrs: b.Addrs(), Data: buyerDir}, API: b.APIURL(), Token: b.Token()}
		t.Info.Buyers = append(t.Info.Buyers, info)
		// The testnet's operator tops each buyer up directly in the ledger, once.
		if _, err := c.Ledger.Credit("testnet/"+b.ID().String(), ledger.Buyer(b.ID().String()), cfg.BuyerCredit, "testnet credit"); err != nil {
			return fail(err)
		}
	}
	t.Buyer, t.Info.Buyer = t.Buyers[0], t.Info.Buyers[0]

	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for i, p := range t.Providers {
		select {
		case <-p.ProviderReady():
		case <-wait.Done():
			return fail(fmt.Errorf("provider %d did not advertise its tier in time: %w", i+1, wait.Err()))
		}
	}
	data, _ := json.MarshalIndent(t.Info, "", "  ")
	if err := writeAtomic(filepath.Join(cfg.Dir, InfoFile), append(data, '\n')); err != nil {
		return fail(err)
	}
	return t, nil
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Close stops every peer: the buyer first, the coordinator last.
func (t *Testnet) Close() error {
	var errs []error
	for _, b := range t.Buyers {
		errs = append(errs, b.Close())
	}
	for _, p := range t.Providers {
		errs = append(errs, p.Close())
	}
	if t.Coordinator != nil {
		errs = append(errs, t.Coordinator.Close())
	}
	return errors.Join(errs...)
}
