// Package p2p builds a GaaS peer's networking: its persistent identity,
// the libp2p host (TCP and QUIC), the Kademlia DHT under GaaS's private
// prefix, and gossipsub. Nodes and the coordinator both start here.
package p2p

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/libp2p/go-libp2p"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/trisparc/gaas/protocol"
)

// IdentityFile is the name of the key file in a peer's data dir.
const IdentityFile = "identity.key"

// LoadIdentity reads the Ed25519 key in dir, creating it on first use.
func LoadIdentity(dir string) (crypto.PrivKey, error) {
	path := filepath.Join(dir, IdentityFile)
	data, err := os.ReadFile(path)
	if err == nil {
		key, err := crypto.UnmarshalPrivateKey(data)
		if err != nil {
			return nil, fmt.Errorf("identity key %s is damaged (%v): move it away to create a new identity", path, err)
		}
		return key, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("reading identity key: %w", err)
	}
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, err
	}
	data, err = crypto.MarshalPrivateKey(key)
	if err != nil {
		return nil, err
	}
	// Write then rename, so a crash never leaves half a key.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return nil, fmt.Errorf("writing identity key: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("writing identity key: %w", err)
	}
	return key, nil
}

// Config says how to start a peer.
type Config struct {
	Key       crypto.PrivKey
	Listen    []string        // multiaddrs; empty means loopback on random ports
	Bootstrap []peer.AddrInfo // DHT bootstrap peers (the coordinator, at least)
}

// DefaultListen is where a peer listens when no address is given: random
// ports on loopback, TCP and QUIC.
var DefaultListen = []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"}

// Peer scoring: a peer whose messages fail validation (forged, malformed,
// stale, or over its rate) loses score quickly, and past the thresholds
// its gossip is ignored, then everything it sends. Colocation is not
// penalised: testnets and LANs put many honest peers behind one address.
func scoreParams() *pubsub.PeerScoreParams {
	topic := &pubsub.TopicScoreParams{
		SkipAtomicValidation:           true,
		TopicWeight:                    1,
		TimeInMeshQuantum:              time.Second,
		InvalidMessageDeliveriesWeight: -20,
		InvalidMessageDeliveriesDecay:  0.9,
	}
	topics := map[string]*pubsub.TopicScoreParams{}
	for _, t := range protocol.Tiers {
		topics[protocol.JobTopic(t)] = topic
	}
	return &pubsub.PeerScoreParams{
		SkipAtomicValidation: true,
		Topics:               topics,
		AppSpecificScore:     func(peer.ID) float64 { return 0 },
		DecayInterval:        time.Second,
		DecayToZero:          0.01,
		RetainScore:          10 * time.Minute,
	}
}

var scoreThresholds = &pubsub.PeerScoreThresholds{
	SkipAtomicValidation: true,
	GossipThreshold:      -20,
	PublishThreshold:     -40,
	GraylistThreshold:    -80,
}

// Peer is a started host with its DHT and gossipsub.
type Peer struct {
	Host   host.Host
	DHT    *dht.IpfsDHT
	PubSub *pubsub.PubSub
	Key    crypto.PrivKey

	bootstrap []peer.AddrInfo
	cancel    context.CancelFunc
}

// Start starts the host, DHT and gossipsub. It does not wait for the
// bootstrap peers; call Bootstrap for that.
func Start(cfg Config) (*Peer, error) {
	listen := cfg.Listen
	if len(listen) == 0 {
		listen = DefaultListen
	}
	h, err := libp2p.New(
		libp2p.Identity(cfg.Key),
		libp2p.ListenAddrStrings(listen...),
	)
	if err != nil {
		return nil, fmt.Errorf("starting libp2p host on %v: %w", listen, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	// Server mode: auto mode stays a client on loopback and LANs, leaving
	// routing tables empty.
	kad, err := dht.New(h,
		dht.ProtocolPrefix(protocol.DHTPrefix),
		dht.Mode(dht.ModeServer),
		dht.BootstrapPeers(cfg.Bootstrap...),
	)
	if err != nil {
		cancel()
		h.Close()
		return nil, fmt.Errorf("starting DHT: %w", err)
	}
	// Flood publish: job requests are small and must not be lost to a mesh
	// that has not formed yet.
	ps, err := pubsub.NewGossipSub(ctx, h,
		pubsub.WithFloodPublish(true),
		pubsub.WithMaxMessageSize(protocol.MaxMessageSize),
		pubsub.WithPeerScore(scoreParams(), scoreThresholds),
	)
	if err != nil {
		cancel()
		kad.Close()
		h.Close()
		return nil, fmt.Errorf("starting gossipsub: %w", err)
	}
	return &Peer{Host: h, DHT: kad, PubSub: ps, Key: cfg.Key, bootstrap: cfg.Bootstrap, cancel: cancel}, nil
}

// ID is the peer's ID.
func (p *Peer) ID() peer.ID { return p.Host.ID() }

// Addrs are the peer's full addresses, each ending in /p2p/ID.
func (p *Peer) Addrs() []string {
	var out []string
	for _, a := range p.Host.Addrs() {
		out = append(out, a.String()+"/p2p/"+p.Host.ID().String())
	}
	return out
}

// Bootstrap connects to the bootstrap peers and waits until the DHT's
// routing table holds at least one peer, or ctx ends.
func (p *Peer) Bootstrap(ctx context.Context) error {
	if len(p.bootstrap) == 0 {
		return nil
	}
	var lastErr error
	connected := 0
	for _, ai := range p.bootstrap {
		if err := p.Host.Connect(ctx, ai); err != nil {
			lastErr = err
			continue
		}
		connected++
	}
	if connected == 0 {
		return fmt.Errorf("could not reach any bootstrap peer: %w", lastErr)
	}
	for p.DHT.RoutingTable().Size() == 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("bootstrap peers reached, but the DHT routing table stayed empty: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return p.DHT.Bootstrap(ctx)
}

// Close stops gossipsub, the DHT and the host.
func (p *Peer) Close() error {
	p.cancel()
	err := p.DHT.Close()
	return errors.Join(err, p.Host.Close())
}

// ParseAddrs parses full multiaddrs (each with /p2p/ID) into peer infos.
func ParseAddrs(addrs []string) ([]peer.AddrInfo, error) {
	var mas []ma.Multiaddr
	for _, s := range addrs {
		m, err := ma.NewMultiaddr(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not a multiaddr (expected like /ip4/127.0.0.1/tcp/4001/p2p/12D3Koo...): %v", s, err)
		}
		mas = append(mas, m)
	}
	infos, err := peer.AddrInfosFromP2pAddrs(mas...)
	if err != nil {
		return nil, fmt.Errorf("peer addresses must end in /p2p/<peer ID>: %w", err)
	}
	return infos, nil
}
