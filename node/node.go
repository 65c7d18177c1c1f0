// Package node is a GaaS peer as a user runs it: always a buyer, and a
// provider when provider mode is on. It joins the DHT and gossipsub,
// keeps its blocks and jobs, talks to the coordinator, and serves the HTTP
// API the app and the CLI use.
package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/trisparc/gaas/api"
	"github.com/trisparc/gaas/blocks"
	"github.com/trisparc/gaas/coordinator"
	"github.com/trisparc/gaas/gpu"
	"github.com/trisparc/gaas/money"
	"github.com/trisparc/gaas/p2p"
	"github.com/trisparc/gaas/protocol"
	"github.com/trisparc/gaas/sandbox"
	"github.com/trisparc/gaas/store"
)

// Config says how to start a node.
type Config struct {
	DataDir     string
	Listen      []string // libp2p multiaddrs; empty: loopback, random ports
	APIAddr     string   // host:port for the HTTP API; empty: 127.0.0.1:0
	Coordinator string   // the coordinator's full multiaddr (…/p2p/ID)
	Bootstrap   []string // more DHT bootstrap peers
	// Provider turns provider mode on at start.
	Provider bool
	// ServeLowerTiers lets a provider take jobs of the tiers below the
	// highest its GPU serves, each at that tier's rate.
	ServeLowerTiers bool
	// GPU reads the provider's cards; nil means detect with NVML when
	// provider mode is turned on.
	GPU gpu.Reader
	// PipIndexURL and PipFindLinks say where a provider's pip installs
	// packages from: an index, or a local folder of wheels.
	PipIndexURL  string
	PipFindLinks string
	// Limits are a provider's limits for every job; zero fields take the
	// sandbox's defaults. The buyer's cap sets the wall time.
	Limits sandbox.Limits
	// Heartbeat is how often a provider tells the coordinator a run is
	// alive; zero means every 5 s. It must be well inside the
	// coordinator's ProviderLost.
	Heartbeat time.Duration
	// MaxDatasetBytes bounds an uploaded CSV; zero means 2 GiB.
	MaxDatasetBytes int64
	Logger          *slog.Logger
}

// TokenFile holds the node's API owner token in its data dir.
const TokenFile = "api.token"

// Node is a running node.
type Node struct {
	cfg    Config
	log    *slog.Logger
	peer   *p2p.Peer
	blocks *blocks.Store
	store  *store.Store
	coord  *coordinator.Client
	token  string
	python string

	httpSrv *http.Server
	apiURL  string

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// Stream handlers hold closing for reading while they use the stores;
	// Close takes it for writing before closing them.
	closing sync.RWMutex

	requests *requestValidator
	metrics  *metrics
	tokens   *tokens

	mu       sync.Mutex
	card     *protocol.RateCard
	topics   map[string]*pubsub.Topic
	runs     map[string]*buyerRun
	offers   map[string]chan offerFrom
	subs     map[string]map[chan api.Event]struct{}
	provider *provider
}

// Start starts a node and its API.
func Start(cfg Config) (*Node, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("a node needs a data folder (--data)")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating data folder: %w", err)
	}
	if cfg.MaxDatasetBytes == 0 {
		cfg.MaxDatasetBytes = 2 << 30
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.Coordinator == "" {
		return nil, errors.New("a node needs the coordinator's address (--coordinator /ip4/…/p2p/ID)")
	}
	coordInfo, err := p2p.ParseAddrs([]string{cfg.Coordinator})
	if err != nil {
		return nil, fmt.Errorf("coordinator address: %w", err)
	}
	extra, err := p2p.ParseAddrs(cfg.Bootstrap)
	if err != nil {
		return nil, fmt.Errorf("bootstrap address: %w", err)
	}
	key, err := p2p.LoadIdentity(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	token, err := loadToken(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	peer, err := p2p.Start(p2p.Config{Key: key, Listen: cfg.Listen, Bootstrap: append(coordInfo, extra...)})
	if err != nil {
		return nil, err
	}
	n := &Node{
		cfg: cfg, log: log.With("peer", peer.ID().ShortString()), peer: peer, token: token,
		coord:  &coordinator.Client{Peer: peer, Coordinator: coordInfo[0].ID},
		topics: map[string]*pubsub.Topic{}, runs: map[string]*buyerRun{},
		offers: map[string]chan offerFrom{}, subs: map[string]map[chan api.Event]struct{}{},
		python: pythonPath(), requests: newRequestValidator(),
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.metrics = newMetrics(n)
	fail := func(err error) (*Node, error) {
		n.Close()
		return nil, err
	}
	if n.store, err = store.Open(filepath.Join(cfg.DataDir, "node.db")); err != nil {
		return fail(err)
	}
	if n.blocks, err = blocks.Open(filepath.Join(cfg.DataDir, "blocks"), peer.Host); err != nil {
		return fail(err)
	}
	peer.Host.SetStreamHandler(protocol.OfferProtocol, n.handleOffer)
	peer.Host.SetStreamHandler(protocol.JobProtocol, n.handleJob)

	ctx, cancel := context.WithTimeout(n.ctx, 15*time.Second)
	err = peer.Bootstrap(ctx)
	cancel()
	if err != nil {
		return fail(fmt.Errorf("joining the network through the coordinator at %s: %w", cfg.Coordinator, err))
	}
	n.recoverJobs()
	if err := n.loadTokens(); err != nil {
		return fail(err)
	}
	if err := n.followRateCard(); err != nil {
		return fail(err)
	}
	if err := n.serveAPI(); err != nil {
		return fail(err)
	}
	if cfg.Provider {
		if err := n.SetProvider(true); err != nil {
			return fail(err)
		}
	}
	return n, nil
}

// Close stops the provider, every job this node follows, the API and the
// peer.
func (n *Node) Close() error {
	n.SetProvider(false)
	if n.cancel != nil {
		n.cancel()
	}
	var errs []error
	if n.httpSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		errs = append(errs, n.httpSrv.Shutdown(ctx))
		cancel()
	}
	n.wg.Wait()
	n.closing.Lock()
	defer n.closing.Unlock()
	if n.blocks != nil {
		errs = append(errs, n.blocks.Close())
	}
	if n.store != nil {
		errs = append(errs, n.store.Close())
	}
	errs = append(errs, n.peer.Close())
	return errors.Join(errs...)
}

// ID is the node's peer ID.
func (n *Node) ID() peer.ID { return n.peer.ID() }

// Addrs are the node's full libp2p addresses.
func (n *Node) Addrs() []string { return n.peer.Addrs() }

// APIURL is where the HTTP API listens.
func (n *Node) APIURL() string { return n.apiURL }

// Token is the API owner token.
func (n *Node) Token() string { return n.token }

func loadToken(dir string) (string, error) {
	path := filepath.Join(dir, TokenFile)
	if data, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(data))) >= 32 {
		return strings.TrimSpace(string(data)), nil
	}
	b := make([]byte, 24)
	rand.Read(b)
	token := hex.EncodeToString(b)
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("writing the API token: %w", err)
	}
	return token, nil
}

// pythonPath is the Python that checks scripts: the one jobs run with.
func pythonPath() string {
	if p, err := sandbox.FindPython(); err == nil {
		return p
	}
	return "python3" // the check then says plainly that it is missing
}

func (n *Node) serveAPI() error {
	addr := n.cfg.APIAddr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("the API cannot listen on %s: %w (is another node using it? pick another with --api)", addr, err)
	}
	n.apiURL = "http://" + ln.Addr().String()
	n.httpSrv = &http.Server{Handler: api.Handler(n, n, n.log), ReadHeaderTimeout: 10 * time.Second}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := n.httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("API server stopped", "err", err)
		}
	}()
	return nil
}

// enter is called by work the node did not start itself (stream
// handlers, downloads) before it touches the stores; it reports false once
// the node is closing. Pair it with leave.
func (n *Node) enter() bool {
	n.closing.RLock()
	if n.ctx.Err() != nil {
		n.closing.RUnlock()
		return false
	}
	return true
}

func (n *Node) leave() { n.closing.RUnlock() }

// goBackground runs f in the background until the node closes.
func (n *Node) goBackground(f func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f()
	}()
}

// Health reports the node's state.
func (n *Node) Health(ctx context.Context) (api.Health, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err := n.coord.RateCard(ctx)
	h := api.Health{OK: true, Peer: n.ID().String(), CoordinatorReachable: err == nil, Version: protocol.Version}
	n.mu.Lock()
	if p := n.provider; p != nil {
		h.Provider, h.Sandbox = true, p.sandbox.Enforcement().String()
	}
	n.mu.Unlock()
	return h, nil
}

// rateCard returns the coordinator's rate card, fetched once and cached.
func (n *Node) rateCard(ctx context.Context) (protocol.RateCard, error) {
	n.mu.Lock()
	card := n.card
	n.mu.Unlock()
	if card != nil {
		return *card, nil
	}
	card, err := n.coord.RateCard(ctx)
	if err != nil {
		return protocol.RateCard{}, err
	}
	n.mu.Lock()
	n.card = card
	n.mu.Unlock()
	return *card, nil
}

// followRateCard keeps the cached rate card current from the
// coordinator's announcements; only the coordinator's signature counts.
func (n *Node) followRateCard() error {
	err := n.peer.PubSub.RegisterTopicValidator(protocol.RateCardTopic, func(_ context.Context, _ peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
		m, signer, err := protocol.Unmarshal(msg.Data)
		if _, ok := m.(*protocol.RateCard); err != nil || !ok || signer != n.coord.Coordinator {
			return pubsub.ValidationReject
		}
		return pubsub.ValidationAccept
	})
	if err != nil {
		return err
	}
	topic, err := n.peer.PubSub.Join(protocol.RateCardTopic)
	if err != nil {
		return err
	}
	sub, err := topic.Subscribe()
	if err != nil {
		return err
	}
	n.goBackground(func() {
		defer sub.Cancel()
		for {
			msg, err := sub.Next(n.ctx)
			if err != nil {
				return
			}
			m, _, err := protocol.Unmarshal(msg.Data)
			card, ok := m.(*protocol.RateCard)
			if err != nil || !ok {
				continue
			}
			n.mu.Lock()
			if n.card == nil || card.IssuedAt >= n.card.IssuedAt {
				n.card = card
			}
			n.mu.Unlock()
		}
	})
	return nil
}

// coordinatorError turns a failure to ask the coordinator into an API error.
func coordinatorError(err error) error {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		status := http.StatusBadRequest
		switch pe.Code {
		case protocol.CodeInsufficientFunds:
			status = http.StatusPaymentRequired
		case protocol.CodeNotFound:
			status = http.StatusNotFound
		case protocol.CodeConflict:
			status = http.StatusConflict
		}
		return &api.Error{Status: status, Code: pe.Code, Message: pe.Message}
	}
	return api.Errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "The coordinator cannot be reached right now (%v). Try again in a moment.", err)
}

// Tiers returns the rate card for display.
func (n *Node) Tiers(ctx context.Context) (api.Tiers, error) {
	card, err := n.rateCard(ctx)
	if err != nil {
		return api.Tiers{}, coordinatorError(err)
	}
	out := api.Tiers{FeeBasisPoints: card.FeeBasisPoints}
	for _, t := range card.Tiers {
		out.Tiers = append(out.Tiers, api.Tier{Name: t.Name, Title: t.Title, Class: t.Class, MinVRAMMiB: t.MinVRAMMiB, Rate: t.RatePaisePerHour, RateDisplay: money.FormatRate(t.RatePaisePerHour)})
	}
	return out, nil
}

// Balance returns the caller's account at the coordinator.
func (n *Node) Balance(ctx context.Context) (api.Balance, error) {
	b, err := n.coord.BalanceOf(ctx, api.AccountFrom(ctx))
	if err != nil {
		return api.Balance{}, coordinatorError(err)
	}
	return api.Balance{
		Account: b.Account, Available: b.Available, Held: b.Held, Earned: b.Earned,
		AvailableDisplay: money.Format(b.Available), HeldDisplay: money.Format(b.Held), EarnedDisplay: money.Format(b.Earned),
		FailedAllowanceSeconds: b.FailedAllowanceSeconds,
	}, nil
}

func entryView(e protocol.LedgerEntry) api.LedgerEntry {
	v := api.LedgerEntry{Seq: e.Seq, At: time.UnixMilli(e.At).UTC(), Kind: e.Kind, Job: e.Job, Reason: e.Reason, Hash: e.Hash}
	for _, l := range e.Legs {
		v.Legs = append(v.Legs, api.LedgerLeg(l))
	}
	return v
}

// History returns this node's ledger entries from the coordinator.
func (n *Node) History(ctx context.Context) ([]api.LedgerEntry, error) {
	req := &protocol.HistoryRequest{}
	if a := api.AccountFrom(ctx); a != "" {
		req.Account = "buyer:" + n.ID().String() + "/" + a
	}
	reply, err := n.coord.Call(ctx, req)
	if err != nil {
		return nil, coordinatorError(err)
	}
	h, ok := reply.(*protocol.History)
	if !ok {
		return nil, fmt.Errorf("the coordinator answered a history request with %s", reply.Kind())
	}
	out := make([]api.LedgerEntry, 0, len(h.Entries))
	for _, e := range h.Entries {
		out = append(out, entryView(e))
	}
	return out, nil
}

// Payout pays this provider's earnings out.
func (n *Node) Payout(ctx context.Context, amount int64, key string) (api.LedgerEntry, error) {
	if err := ownerOnly(ctx); err != nil {
		return api.LedgerEntry{}, err
	}
	if amount <= 0 {
		return api.LedgerEntry{}, api.Errorf(http.StatusBadRequest, api.CodeInvalidInput, "A payout must be more than ₹0.")
	}
	if key == "" {
		key = newJobID() // a client that does not retry needs no stable key
	}
	reply, err := n.coord.Call(ctx, &protocol.PayoutRequest{Key: key, Amount: amount})
	if err != nil {
		return api.LedgerEntry{}, coordinatorError(err)
	}
	p, ok := reply.(*protocol.Posted)
	if !ok {
		return api.LedgerEntry{}, fmt.Errorf("the coordinator answered a payout with %s", reply.Kind())
	}
	return entryView(p.Entry), nil
}

// topic joins a gossipsub topic once, with a validator that drops
// anything that is not a well-formed, signed job request from its sender.
func (n *Node) topic(name string) (*pubsub.Topic, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if t, ok := n.topics[name]; ok {
		return t, nil
	}
	err := n.peer.PubSub.RegisterTopicValidator(name, func(_ context.Context, _ peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
		return n.requests.check(name, msg.GetFrom(), msg.Data, time.Now())
	})
	if err != nil {
		return nil, err
	}
	t, err := n.peer.PubSub.Join(name)
	if err != nil {
		return nil, err
	}
	n.topics[name] = t
	return t, nil
}

func newJobID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "j-" + hex.EncodeToString(b)
}
