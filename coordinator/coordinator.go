// Package coordinator is the marketplace's ledger peer: it publishes the
// rate card, holds a buyer's funds when a job starts, meters the run with
// its own clock between the provider's signed start and end notices, and
// settles. It is also a DHT bootstrap peer. It never sees datasets or
// scripts.
package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/trisparc/gaas/ledger"
	"github.com/trisparc/gaas/money"
	"github.com/trisparc/gaas/p2p"
	"github.com/trisparc/gaas/protocol"
)

// DefaultRateCard is the price list a new coordinator publishes.
func DefaultRateCard() protocol.RateCard {
	return protocol.RateCard{
		Tiers: []protocol.Tier{
			{Name: protocol.TierStarter, Title: "Starter", MinVRAMMiB: 8<<10 - 512, Class: "RTX 3060/4060 class, 8 GB+", RatePaisePerHour: 3000},
			{Name: protocol.TierPro, Title: "Pro", MinVRAMMiB: 12<<10 - 512, Class: "RTX 4070 class, 12 GB+", RatePaisePerHour: 5000},
			{Name: protocol.TierMax, Title: "Max", MinVRAMMiB: 20<<10 - 512, Class: "RTX 4090 class, 20 GB+", RatePaisePerHour: 12000},
		},
		FeeBasisPoints: 1000,
	}
}

// LoadRateCard reads and checks a rate card file.
func LoadRateCard(path string) (protocol.RateCard, error) {
	var card protocol.RateCard
	data, err := os.ReadFile(path)
	if err != nil {
		return card, fmt.Errorf("reading the rate card: %w", err)
	}
	if err := json.Unmarshal(data, &card); err != nil {
		return card, fmt.Errorf("the rate card %s is not valid JSON: %v", path, err)
	}
	if card.FeeBasisPoints < 0 || card.FeeBasisPoints > 10000 {
		return card, fmt.Errorf("the rate card's fee_bps must be between 0 and 10000, not %d", card.FeeBasisPoints)
	}
	seen := map[string]bool{}
	for _, t := range card.Tiers {
		switch {
		case !protocol.KnownTier(t.Name):
			return card, fmt.Errorf("the rate card names tier %q; tiers are %v", t.Name, protocol.Tiers)
		case seen[t.Name]:
			return card, fmt.Errorf("the rate card lists tier %q twice", t.Name)
		case t.RatePaisePerHour <= 0:
			return card, fmt.Errorf("tier %q needs a rate above zero (paise per hour)", t.Name)
		}
		seen[t.Name] = true
	}
	return card, nil
}

// Config says how to start a coordinator.
type Config struct {
	DataDir  string
	Listen   []string
	RateCard protocol.RateCard // zero means DefaultRateCard
	// ProviderLost is how long after its last heartbeat a running
	// provider is taken as lost; zero means DefaultProviderLost.
	ProviderLost time.Duration
	// Operators may credit accounts, read every account's history and
	// verify the ledger. The coordinator's own key is always one.
	Operators []peer.ID
	// RateCardFile, when set, is a JSON rate card to publish instead of
	// the default: {"tiers": [{"name", "title", "min_vram_mib", "class",
	// "rate"}], "fee_bps"}.
	RateCardFile string
	// AnnounceEvery is how often the rate card is announced; zero means 30 s.
	AnnounceEvery time.Duration
	// Ledger tunes the ledger (the failed-run allowance); nil is the default.
	Ledger *ledger.Options
	Logger *slog.Logger
}

// unstartedHoldTTL is how long a hold may wait for its run to start
// before it is taken as abandoned.
const unstartedHoldTTL = 24 * time.Hour

// DefaultProviderLost is three missed heartbeats and a little more.
const DefaultProviderLost = 20 * time.Second

// Coordinator is a running ledger peer.
type Coordinator struct {
	Peer   *p2p.Peer
	Ledger *ledger.Ledger
	card   protocol.RateCard
	log    *slog.Logger
	now    func() time.Time
	lost   time.Duration

	operators map[peer.ID]bool

	mu        sync.Mutex
	heartbeat map[string]time.Time // running job → its provider's last sign of life

	stop context.CancelFunc
	done chan struct{}
}

// Start opens the ledger and starts the peer.
func Start(cfg Config) (*Coordinator, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the coordinator's data folder: %w", err)
	}
	key, err := p2p.LoadIdentity(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	lopt := ledger.Options{}
	if cfg.Ledger != nil {
		lopt = *cfg.Ledger
	}
	lopt.GroupCommit = true // many buyers and providers at once share commits
	l, err := ledger.Open(filepath.Join(cfg.DataDir, "ledger.db"), &lopt)
	if err != nil {
		return nil, err
	}
	host, err := p2p.Start(p2p.Config{Key: key, Listen: cfg.Listen})
	if err != nil {
		l.Close()
		return nil, err
	}
	card := cfg.RateCard
	if cfg.RateCardFile != "" {
		if card, err = LoadRateCard(cfg.RateCardFile); err != nil {
			host.Close()
			l.Close()
			return nil, err
		}
	}
	if len(card.Tiers) == 0 {
		card = DefaultRateCard()
	}
	card.IssuedAt = time.Now().UnixMilli()
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	lost := cfg.ProviderLost
	if lost == 0 {
		lost = DefaultProviderLost
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Coordinator{
		Peer: host, Ledger: l, card: card, log: log.With("peer", "coordinator"), now: time.Now, lost: lost,
		heartbeat: map[string]time.Time{}, stop: cancel, done: make(chan struct{}),
		operators: map[peer.ID]bool{host.ID(): true},
	}
	for _, op := range cfg.Operators {
		c.operators[op] = true
	}
	host.Host.SetStreamHandler(protocol.LedgerProtocol, c.handle)
	topic, err := host.PubSub.Join(protocol.RateCardTopic)
	if err != nil {
		c.Close()
		return nil, err
	}
	go c.sweep(ctx)
	every := cfg.AnnounceEvery
	if every == 0 {
		every = announceEvery
	}
	go c.announce(ctx, topic, every)
	return c, nil
}

// announceEvery is how often the rate card is announced on its topic, so
// that nodes that joined since see it without asking.
const announceEvery = 30 * time.Second

// announce publishes the signed rate card on its topic, now and then
// at every tick.
func (c *Coordinator) announce(ctx context.Context, topic *pubsub.Topic, every time.Duration) {
	for {
		card := c.card
		if env, err := protocol.Seal(c.Peer.Key, &card); err == nil {
			if data, err := protocol.Marshal(env); err == nil {
				topic.Publish(ctx, data)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// Close stops the sweeper and the peer, then closes the ledger.
func (c *Coordinator) Close() error {
	c.stop()
	<-c.done
	err := c.Peer.Close()
	return errors.Join(err, c.Ledger.Close())
}

// sweep voids the holds of runs whose provider stopped sending
// heartbeats: a provider that vanished is paid nothing, and neither is the
// buyer charged.
func (c *Coordinator) sweep(ctx context.Context) {
	defer close(c.done)
	tick := time.NewTicker(max(c.lost/4, 50*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		holds, err := c.Ledger.OpenHolds()
		if err != nil {
			c.log.Error("listing open holds", "err", err)
			continue
		}
		open := map[string]bool{}
		for _, h := range holds {
			open[h.Job] = true
			switch {
			case h.StartedAt == 0 && h.PlacedAt != 0 && c.now().Sub(time.UnixMilli(h.PlacedAt)) > unstartedHoldTTL:
				// Abandoned: the buyer that held it never started it and
				// never let it go.
				if _, err := c.Ledger.Release(h.Job, "held for a day without starting: released"); err == nil {
					c.log.Warn("unstarted hold released", "job", h.Job)
				}
			case h.StartedAt == 0 || c.alive(h.Job):
			default:
				if _, err := c.Ledger.Release(h.Job, "the provider was lost: not charged"); err == nil {
					c.log.Warn("provider lost", "job", h.Job, "provider", h.Provider)
					c.forget(h.Job)
				}
			}
		}
		c.mu.Lock()
		for job := range c.heartbeat {
			if !open[job] {
				delete(c.heartbeat, job) // a beat that came in as the run ended
			}
		}
		c.mu.Unlock()
	}
}

// alive reports whether a running job's provider was heard from lately. A
// job the coordinator has not heard about since it restarted gets a fresh
// grace period.
func (c *Coordinator) alive(job string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	last, ok := c.heartbeat[job]
	if !ok {
		c.heartbeat[job] = c.now()
		return true
	}
	return c.now().Sub(last) < c.lost
}

func (c *Coordinator) beat(job string) {
	c.mu.Lock()
	c.heartbeat[job] = c.now()
	c.mu.Unlock()
}

func (c *Coordinator) forget(job string) {
	c.mu.Lock()
	delete(c.heartbeat, job)
	c.mu.Unlock()
}

// RateCard is the coordinator's current rate card.
func (c *Coordinator) RateCard() protocol.RateCard { return c.card }

func (c *Coordinator) handle(s network.Stream) {
	defer s.Close()
	s.SetDeadline(time.Now().Add(30 * time.Second))
	conn := protocol.NewConn(s, c.Peer.Key)
	m, signer, _, err := conn.Receive()
	if err != nil {
		conn.Send(&protocol.Error{Code: protocol.CodeBadRequest, Message: "The coordinator could not read the request: " + err.Error()})
		return
	}
	reply, err := c.answer(m, signer)
	if err != nil {
		var pe *protocol.Error
		if !errors.As(err, &pe) {
			c.log.Error("ledger request failed", "kind", m.Kind(), "from", signer, "err", err)
			pe = &protocol.Error{Code: protocol.CodeInternal, Message: "The coordinator failed to process the request; try again."}
		}
		reply = pe
	}
	conn.Send(reply)
}

func refuse(code, format string, args ...any) error {
	return &protocol.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func (c *Coordinator) answer(m protocol.Message, signer peer.ID) (protocol.Message, error) {
	switch m := m.(type) {
	case *protocol.RateCardRequest:
		card := c.card
		return &card, nil
	case *protocol.BalanceRequest:
		id, err := buyerOf(signer, m.Account)
		if err != nil {
			return nil, err
		}
		b := &protocol.Balance{
			Account:                id,
			Available:              c.Ledger.Balance(ledger.Buyer(id)),
			Held:                   c.Ledger.HeldFor(id),
			FailedAllowanceSeconds: c.Ledger.AllowanceLeft(id),
		}
		if m.Account == "" {
			b.Earned = c.Ledger.Balance(ledger.Provider(id))
		}
		return b, nil
	case *protocol.CreditRequest:
		if !c.operators[signer] {
			return nil, refuse(protocol.CodeForbidden, "Only the coordinator's operator may credit accounts.")
		}
		e, err := c.Ledger.Credit(m.Key, m.Account, m.Amount, m.Reason)
		if err != nil {
			return nil, ledgerRefusal(err)
		}
		c.log.Info("credit", "account", m.Account, "amount", m.Amount, "key", m.Key)
		return &protocol.Posted{Entry: entryView(e)}, nil
	case *protocol.PayoutRequest:
		e, err := c.Ledger.Payout(m.Key, signer.String(), m.Amount)
		if err != nil {
			return nil, ledgerRefusal(err)
		}
		return &protocol.Posted{Entry: entryView(e)}, nil
	case *protocol.HistoryRequest:
		return c.history(m, signer)
	case *protocol.VerifyRequest:
		if !c.operators[signer] {
			return nil, refuse(protocol.CodeForbidden, "Only the coordinator's operator may verify the ledger.")
		}
		r, err := c.Ledger.Verify()
		if err != nil {
			return nil, err
		}
		return &protocol.VerifyReport{Entries: r.Entries, Accounts: r.Accounts, Holds: r.Holds, OpenHolds: r.OpenHolds, HeadSeq: r.HeadSeq, HeadHash: r.HeadHash, Problems: r.Problems}, nil
	case *protocol.HoldRequest:
		return c.hold(m, signer)
	case *protocol.StartNotice:
		return c.start(m, signer)
	case *protocol.EndNotice:
		return c.end(m, signer)
	case *protocol.CancelNotice:
		return c.cancel(m, signer)
	case *protocol.AbortNotice:
		return c.abort(m, signer)
	case *protocol.ReceiptNotice:
		h, err := c.holdOf(m.JobID)
		if err != nil {
			return nil, err
		}
		if ownerOf(h.Buyer) != signer.String() {
			return nil, refuse(protocol.CodeForbidden, "Only the job's buyer may say its run ended.")
		}
		if h, err = c.Ledger.MarkStopped(m.JobID, c.now()); err != nil {
			return nil, err
		}
		return settlement(h), nil
	case *protocol.Heartbeat:
		h, err := c.holdOf(m.JobID)
		if err != nil {
			return nil, err
		}
		if h.Provider != signer.String() {
			return nil, refuse(protocol.CodeForbidden, "Only the provider running job %s sends its heartbeats.", m.JobID)
		}
		if h.State == ledger.Held {
			c.beat(m.JobID)
		}
		return settlement(h), nil
	case *protocol.SettlementRequest:
		h, err := c.holdOf(m.JobID)
		if err != nil {
			return nil, err
		}
		if signer.String() != ownerOf(h.Buyer) && signer.String() != h.Provider {
			return nil, refuse(protocol.CodeForbidden, "Only the job's buyer or provider may see its settlement.")
		}
		return settlement(h), nil
	}
	return nil, refuse(protocol.CodeBadRequest, "The coordinator does not answer %s messages.", m.Kind())
}

func (c *Coordinator) hold(m *protocol.HoldRequest, buyer peer.ID) (protocol.Message, error) {
	tier, ok := c.card.Tier(m.Tier)
	if !ok {
		return nil, refuse(protocol.CodeUnknownTier, "There is no %q tier on the rate card.", m.Tier)
	}
	if m.JobID == "" || m.CapSeconds <= 0 || m.CapSeconds > 7*24*3600 {
		return nil, refuse(protocol.CodeBadRequest, "A hold needs a job ID and a budget cap between 1 second and 7 days.")
	}
	holder, err := buyerOf(buyer, m.Account)
	if err != nil {
		return nil, err
	}
	amount, err := money.Charge(tier.RatePaisePerHour, m.CapSeconds)
	if err != nil {
		return nil, err
	}
	if amount == 0 {
		amount = 1 // a hold always holds something, so it can be resolved
	}
	h, err := c.Ledger.PlaceHold(ledger.Hold{Job: m.JobID, Buyer: holder, Tier: tier.Name, Rate: tier.RatePaisePerHour, CapSeconds: m.CapSeconds, Amount: amount})
	switch {
	case errors.Is(err, ledger.ErrInsufficientFunds):
		have := c.Ledger.Balance(ledger.Buyer(holder))
		return nil, refuse(protocol.CodeInsufficientFunds, "Not enough balance: this job can cost up to %s (%s for %s) but your available balance is %s. Add funds or lower the budget cap.",
			money.Format(amount), money.FormatRate(tier.RatePaisePerHour), (time.Duration(m.CapSeconds) * time.Second).String(), money.Format(have))
	case errors.Is(err, ledger.ErrConflict):
		return nil, refuse(protocol.CodeConflict, "Job %s already has a different hold.", m.JobID)
	case err != nil:
		return nil, err
	}
	c.log.Info("hold placed", "job", h.Job, "amount", h.Amount)
	return settlement(h), nil
}

func (c *Coordinator) start(m *protocol.StartNotice, provider peer.ID) (protocol.Message, error) {
	inner, buyer, err := protocol.Open(m.Accept)
	if err != nil {
		return nil, refuse(protocol.CodeBadRequest, "The start notice carries no valid buyer signature: %v", err)
	}
	accept, ok := inner.(*protocol.Accept)
	if !ok {
		return nil, refuse(protocol.CodeBadRequest, "The start notice must carry the buyer's accept.")
	}
	ct := accept.Contract
	inner, committer, err := protocol.Open(m.Commit)
	if err != nil {
		return nil, refuse(protocol.CodeForbidden, "The start notice carries no valid commit from the buyer: %v", err)
	}
	commit, ok := inner.(*protocol.Commit)
	if !ok || committer != buyer || commit.JobID != m.JobID || commit.Provider != provider.String() {
		return nil, refuse(protocol.CodeForbidden, "The buyer did not commit job %s to this provider.", m.JobID)
	}
	h, err := c.holdOf(m.JobID)
	if err != nil {
		return nil, err
	}
	switch {
	case ct.JobID != m.JobID || ct.Buyer != buyer.String() || ct.Provider != provider.String():
		return nil, refuse(protocol.CodeForbidden, "The contract was not signed by this job's buyer for this provider.")
	case ownerOf(h.Buyer) != ct.Buyer || h.Rate != ct.RatePaisePerHour || h.CapSeconds != ct.CapSeconds || h.Tier != ct.Tier:
		return nil, refuse(protocol.CodeConflict, "The contract does not match the funds held for job %s.", m.JobID)
	}
	h, err = c.Ledger.MarkStarted(m.JobID, provider.String(), c.now())
	if errors.Is(err, ledger.ErrConflict) {
		return nil, refuse(protocol.CodeConflict, "Job %s has already started elsewhere or ended.", m.JobID)
	}
	if err != nil {
		return nil, err
	}
	c.beat(m.JobID)
	c.log.Info("run started", "job", h.Job, "provider", provider)
	return settlement(h), nil
}

// meteredSeconds is the coordinator's own measure of a run: whole seconds
// since the start notice, at least one once a run has started.
func (c *Coordinator) meteredSeconds(h ledger.Hold) int64 {
	end := c.now().UnixMilli()
	if h.StoppedAt != 0 && h.StoppedAt < end {
		end = h.StoppedAt // the buyer heard the run end first
	}
	return max(1, (end-h.StartedAt)/1000)
}

func (c *Coordinator) end(m *protocol.EndNotice, provider peer.ID) (protocol.Message, error) {
	h, err := c.holdOf(m.JobID)
	if err != nil {
		return nil, err
	}
	if h.Provider != provider.String() {
		return nil, refuse(protocol.CodeForbidden, "Only the provider running job %s may end it.", m.JobID)
	}
	if h.State != ledger.Held {
		return settlement(h), nil // already settled by a cancel or an earlier notice
	}
	switch {
	case m.Outcome == protocol.OutcomeCompleted:
		h, err = c.Ledger.Settle(m.JobID, c.meteredSeconds(h), c.card.FeeBasisPoints, "completed")
	case m.Outcome == protocol.OutcomeCancelled:
		h, err = c.Ledger.Settle(m.JobID, c.meteredSeconds(h), c.card.FeeBasisPoints, "cancelled by the buyer")
	case m.Outcome == protocol.OutcomeFailed && m.Cause == protocol.CauseCap:
		// The buyer's budget ran out: the cap is what it agreed to pay.
		h, err = c.Ledger.Settle(m.JobID, min(c.meteredSeconds(h), h.CapSeconds), c.card.FeeBasisPoints, "stopped at the budget cap")
	case m.Outcome == protocol.OutcomeFailed:
		// The script or its data failed: the buyer's allowance decides who pays.
		h, err = c.Ledger.SettleFailure(m.JobID, c.meteredSeconds(h), c.card.FeeBasisPoints, "the script failed ("+m.Cause+")")
	default:
		h, err = c.Ledger.Release(m.JobID, "the provider could not run the job: not charged")
	}
	if err != nil {
		return nil, err
	}
	c.forget(m.JobID)
	c.log.Info("run ended", "job", h.Job, "outcome", m.Outcome, "seconds", h.Seconds, "charged", h.Charged)
	return settlement(h), nil
}

func (c *Coordinator) cancel(m *protocol.CancelNotice, buyer peer.ID) (protocol.Message, error) {
	h, err := c.holdOf(m.JobID)
	if err != nil {
		return nil, err
	}
	if ownerOf(h.Buyer) != buyer.String() {
		return nil, refuse(protocol.CodeForbidden, "Only the job's buyer may cancel it.")
	}
	if h.State != ledger.Held {
		return settlement(h), nil
	}
	switch {
	case h.StartedAt == 0:
		h, err = c.Ledger.Release(m.JobID, "cancelled before it started")
	case !c.alive(m.JobID):
		// The provider had already gone silent: it is not paid, and the
		// buyer is not charged, for a run that was lost anyway.
		h, err = c.Ledger.Release(m.JobID, "the provider was lost: not charged")
	default:
		h, err = c.Ledger.Settle(m.JobID, c.meteredSeconds(h), c.card.FeeBasisPoints, "cancelled by the buyer")
	}
	if err != nil {
		return nil, err
	}
	c.forget(m.JobID)
	return settlement(h), nil
}

func (c *Coordinator) abort(m *protocol.AbortNotice, buyer peer.ID) (protocol.Message, error) {
	h, err := c.holdOf(m.JobID)
	if err != nil {
		return nil, err
	}
	if ownerOf(h.Buyer) != buyer.String() {
		return nil, refuse(protocol.CodeForbidden, "Only the job's buyer may report its provider lost.")
	}
	if h.State != ledger.Held {
		return settlement(h), nil
	}
	// The buyer's word alone does not void a run that started: only the
	// provider's silence does, or a buyer could take a finished run free.
	reason := "the job never started: not charged"
	if h.StartedAt != 0 {
		if c.alive(m.JobID) {
			return nil, refuse(protocol.CodeConflict, "The provider of job %s is still sending heartbeats; its end notice will settle the job.", m.JobID)
		}
		reason = "the provider was lost: not charged"
	}
	if h, err = c.Ledger.Release(m.JobID, reason); err != nil {
		return nil, err
	}
	c.forget(m.JobID)
	return settlement(h), nil
}

func (c *Coordinator) holdOf(job string) (ledger.Hold, error) {
	h, err := c.Ledger.Hold(job)
	if errors.Is(err, ledger.ErrNoHold) {
		return h, refuse(protocol.CodeNotFound, "The coordinator holds no funds for job %s.", job)
	}
	return h, err
}

// A node serving many users (a hosted node) keeps each one's money in a
// sub-account of its own: "PEER/NAME". Only the peer may use them.
var subAccountName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// buyerOf is the buyer a signer acts for: itself, or one of its
// sub-accounts.
func buyerOf(signer peer.ID, sub string) (string, error) {
	if sub == "" {
		return signer.String(), nil
	}
	if !subAccountName.MatchString(sub) {
		return "", refuse(protocol.CodeBadRequest, "%q is not a sub-account name (lowercase letters, digits, - and _; up to 32).", sub)
	}
	return signer.String() + "/" + sub, nil
}

// ownerOf is the peer behind a buyer account.
func ownerOf(buyer string) string {
	owner, _, _ := strings.Cut(buyer, "/")
	return owner
}

func settlement(h ledger.Hold) *protocol.Settlement {
	return &protocol.Settlement{
		JobID: h.Job, State: h.State, RatePaisePerHour: h.Rate, Held: h.Amount,
		Seconds: h.Seconds, Charged: h.Charged, Fee: h.Fee, ProviderPaid: h.ProviderPaid, Reason: h.Reason,
		FailedRunsCharged: h.ChargeFailures,
	}
}

func entryView(e ledger.Entry) protocol.LedgerEntry {
	v := protocol.LedgerEntry{Seq: e.Seq, At: e.At, Kind: e.Kind, Job: e.Job, Reason: e.Reason, Hash: e.Hash}
	for _, l := range e.Legs {
		v.Legs = append(v.Legs, protocol.LedgerLeg{Account: l.Account, Amount: l.Amount})
	}
	return v
}

// ledgerRefusal turns the ledger's refusals into sentences.
func ledgerRefusal(err error) error {
	switch {
	case errors.Is(err, ledger.ErrInsufficientFunds):
		return refuse(protocol.CodeInsufficientFunds, "The account does not hold that much.")
	case errors.Is(err, ledger.ErrConflict):
		return refuse(protocol.CodeConflict, "That key was already used for a different request: %v.", err)
	case errors.Is(err, ledger.ErrBadAmount):
		return refuse(protocol.CodeBadRequest, "The amount must be more than zero.")
	case errors.Is(err, ledger.ErrBadAccount):
		return refuse(protocol.CodeBadRequest, "%v.", err)
	}
	return err
}

// history returns journal entries: a peer sees its own accounts; an
// operator any account, or all.
func (c *Coordinator) history(m *protocol.HistoryRequest, signer peer.ID) (protocol.Message, error) {
	var accounts []string
	switch {
	case c.operators[signer]:
		accounts = []string{m.Account}
	case m.Account == "":
		accounts = []string{ledger.Buyer(signer.String()), ledger.Provider(signer.String())}
	case m.Account == ledger.Buyer(signer.String()) || m.Account == ledger.Provider(signer.String()),
		strings.HasPrefix(m.Account, ledger.Buyer(signer.String())+"/"):
		accounts = []string{m.Account}
	default:
		return nil, refuse(protocol.CodeForbidden, "A peer may read only its own accounts' history.")
	}
	seen := map[uint64]bool{}
	var out []ledger.Entry
	for _, a := range accounts {
		es, err := c.Ledger.History(a)
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			if !seen[e.Seq] {
				seen[e.Seq] = true
				out = append(out, e)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	limit := m.Limit
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	if len(out) > limit {
		out = out[len(out)-limit:]
	}
	h := &protocol.History{}
	for _, e := range out {
		h.Entries = append(h.Entries, entryView(e))
	}
	return h, nil
}

// Client asks a coordinator over its ledger protocol.
type Client struct {
	Peer        *p2p.Peer
	Coordinator peer.ID
}

// ErrUnreachable means the coordinator could not be asked at all.
var ErrUnreachable = errors.New("the coordinator could not be reached")

// Call sends one request and returns the coordinator's signed answer. A
// refusal comes back as a *protocol.Error.
func (cl *Client) Call(ctx context.Context, req protocol.Message) (protocol.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	s, err := cl.Peer.Host.NewStream(ctx, cl.Coordinator, protocol.LedgerProtocol)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	defer s.Close()
	if d, ok := ctx.Deadline(); ok {
		s.SetDeadline(d)
	}
	conn := protocol.NewConn(s, cl.Peer.Key)
	if err := conn.Send(req); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	reply, signer, _, err := conn.Receive()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	if signer != cl.Coordinator {
		return nil, fmt.Errorf("answer to %s signed by %s, not the coordinator", req.Kind(), signer)
	}
	if e, ok := reply.(*protocol.Error); ok {
		return nil, e
	}
	return reply, nil
}

// Settlement asks for a job's settlement.
func (cl *Client) Settlement(ctx context.Context, job string) (*protocol.Settlement, error) {
	return call[*protocol.Settlement](ctx, cl, &protocol.SettlementRequest{JobID: job})
}

// Send sends a notice or request whose answer is a settlement.
func (cl *Client) Send(ctx context.Context, m protocol.Message) (*protocol.Settlement, error) {
	return call[*protocol.Settlement](ctx, cl, m)
}

// RateCard fetches the rate card.
func (cl *Client) RateCard(ctx context.Context) (*protocol.RateCard, error) {
	return call[*protocol.RateCard](ctx, cl, &protocol.RateCardRequest{})
}

// Balance fetches the caller's own balance.
func (cl *Client) Balance(ctx context.Context) (*protocol.Balance, error) {
	return cl.BalanceOf(ctx, "")
}

// BalanceOf fetches the balance of one of the caller's sub-accounts ("":
// its own).
func (cl *Client) BalanceOf(ctx context.Context, account string) (*protocol.Balance, error) {
	return call[*protocol.Balance](ctx, cl, &protocol.BalanceRequest{Account: account})
}

func call[T protocol.Message](ctx context.Context, cl *Client, req protocol.Message) (T, error) {
	var zero T
	reply, err := cl.Call(ctx, req)
	if err != nil {
		return zero, err
	}
	t, ok := reply.(T)
	if !ok {
		return zero, fmt.Errorf("the coordinator answered %s with %s", req.Kind(), reply.Kind())
	}
	return t, nil
}
