package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/trisparc/gaas/ledger"
	"github.com/trisparc/gaas/p2p"
	"github.com/trisparc/gaas/protocol"
)

// party is a peer that talks to the coordinator: a buyer or a provider.
type party struct {
	*Client
	key crypto.PrivKey
	id  string
}

func start(t *testing.T, lost time.Duration) (*Coordinator, party, party, party) {
	t.Helper()
	c, err := Start(Config{DataDir: filepath.Join(t.TempDir(), "c"), ProviderLost: lost, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	info, _ := p2p.ParseAddrs(c.Peer.Addrs()[:1])
	newParty := func() party {
		key, err := p2p.LoadIdentity(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		p, err := p2p.Start(p2p.Config{Key: key, Bootstrap: info})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return party{Client: &Client{Peer: p, Coordinator: c.Peer.ID()}, key: key, id: p.ID().String()}
	}
	return c, newParty(), newParty(), newParty()
}

func seal(t *testing.T, key crypto.PrivKey, m protocol.Message) protocol.Envelope {
	t.Helper()
	env, err := protocol.Seal(key, m)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func code(err error) string {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// contract holds funds for a job and returns the buyer's signed accept.
func contract(t *testing.T, c *Coordinator, buyer, provider party, job string, cap int64) protocol.Envelope {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Ledger.Credit("test/"+buyer.id, ledger.Buyer(buyer.id), 100000, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := buyer.Send(ctx, &protocol.HoldRequest{JobID: job, Tier: "pro", CapSeconds: cap}); err != nil {
		t.Fatal(err)
	}
	return seal(t, buyer.key, &protocol.Accept{Contract: protocol.Contract{
		JobID: job, Tier: "pro", RatePaisePerHour: 5000, CapSeconds: cap, Buyer: buyer.id, Provider: provider.id,
	}})
}

func TestStartNeedsTheBuyersCommitToThisProvider(t *testing.T) {
	c, buyer, provider, other := start(t, time.Minute)
	ctx := context.Background()
	accept := contract(t, c, buyer, provider, "j-1", 3600)
	for name, commit := range map[string]protocol.Envelope{
		"no commit":              {},
		"commit by provider":     seal(t, provider.key, &protocol.Commit{JobID: "j-1", Provider: provider.id}),
		"commit to another":      seal(t, buyer.key, &protocol.Commit{JobID: "j-1", Provider: other.id}),
		"commit for another job": seal(t, buyer.key, &protocol.Commit{JobID: "j-2", Provider: provider.id}),
	} {
		if _, err := provider.Send(ctx, &protocol.StartNotice{JobID: "j-1", Accept: accept, Commit: commit}); code(err) != protocol.CodeForbidden {
			t.Errorf("%s: %v, want forbidden", name, err)
		}
	}
	commit := seal(t, buyer.key, &protocol.Commit{JobID: "j-1", Provider: provider.id})
	if _, err := other.Send(ctx, &protocol.StartNotice{JobID: "j-1", Accept: accept, Commit: commit}); code(err) != protocol.CodeForbidden {
		t.Errorf("a third peer replaying the buyer's accept and commit: %v", err)
	}
	if _, err := provider.Send(ctx, &protocol.StartNotice{JobID: "j-1", Accept: accept, Commit: commit}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Send(ctx, &protocol.EndNotice{JobID: "j-1", Outcome: protocol.OutcomeCompleted}); code(err) != protocol.CodeForbidden {
		t.Errorf("end notice from another peer: %v", err)
	}
	// While the provider is alive, the buyer's word cannot void the run.
	if _, err := buyer.Send(ctx, &protocol.AbortNotice{JobID: "j-1"}); code(err) != protocol.CodeConflict {
		t.Errorf("abort of a live run: %v", err)
	}
	set, err := provider.Send(ctx, &protocol.EndNotice{JobID: "j-1", Outcome: protocol.OutcomeFailed, Cause: protocol.CauseCap})
	if err != nil || set.State != protocol.HoldSettled || set.Seconds != 1 {
		t.Fatalf("stopped at the cap: %+v %v", set, err)
	}
}

func TestLostProviderIsVoided(t *testing.T) {
	c, buyer, provider, _ := start(t, 300*time.Millisecond)
	ctx := context.Background()
	accept := contract(t, c, buyer, provider, "j-1", 3600)
	commit := seal(t, buyer.key, &protocol.Commit{JobID: "j-1", Provider: provider.id})
	if _, err := provider.Send(ctx, &protocol.StartNotice{JobID: "j-1", Accept: accept, Commit: commit}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ { // heartbeats keep it alive past the loss window
		time.Sleep(100 * time.Millisecond)
		if _, err := provider.Send(ctx, &protocol.Heartbeat{JobID: "j-1"}); err != nil {
			t.Fatal(err)
		}
	}
	if set, _ := buyer.Settlement(ctx, "j-1"); set.State != protocol.HoldHeld {
		t.Fatalf("voided while heartbeats came: %+v", set)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		set, err := buyer.Settlement(ctx, "j-1")
		if err == nil && set.State == protocol.HoldReleased && strings.Contains(set.Reason, "lost") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not voided after the heartbeats stopped: %+v %v", set, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := c.Ledger.Balance(ledger.Buyer(buyer.id)); got != 100000 {
		t.Fatalf("buyer has %d after a lost provider, want all of it back", got)
	}
}

func TestHoldRefusals(t *testing.T) {
	_, buyer, _, _ := start(t, time.Minute)
	ctx := context.Background()
	_, err := buyer.Send(ctx, &protocol.HoldRequest{JobID: "j-1", Tier: "pro", CapSeconds: 3600})
	if code(err) != protocol.CodeInsufficientFunds || !strings.Contains(err.Error(), "can cost up to ₹50 (₹50/hr for 1h0m0s) but your available balance is ₹0") {
		t.Fatalf("no funds: %v", err)
	}
	if _, err := buyer.Send(ctx, &protocol.HoldRequest{JobID: "j-1", Tier: "ultra", CapSeconds: 60}); code(err) != protocol.CodeUnknownTier {
		t.Fatalf("unknown tier: %v", err)
	}
	if _, err := buyer.Send(ctx, &protocol.HoldRequest{JobID: "j-1", Tier: "pro", CapSeconds: -5}); code(err) != protocol.CodeBadRequest {
		t.Fatalf("negative cap: %v", err)
	}
}

// TestOperatorRequests: only an operator credits and verifies; a peer
// reads only its own history and pays out only its own earnings.
func TestOperatorRequests(t *testing.T) {
	c, buyer, provider, operator := start(t, time.Minute)
	c.operators[operator.Peer.ID()] = true
	ctx := context.Background()
	credit := &protocol.CreditRequest{Key: "top-up-1", Account: ledger.Buyer(buyer.id), Amount: 50000, Reason: "UPI top-up"}
	if _, err := buyer.Call(ctx, credit); code(err) != protocol.CodeForbidden {
		t.Fatalf("a buyer crediting itself: %v", err)
	}
	for i := 0; i < 2; i++ { // the retry changes nothing
		if _, err := operator.Call(ctx, credit); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.Ledger.Balance(ledger.Buyer(buyer.id)); got != 50000 {
		t.Fatalf("balance after a credit and its retry: %d", got)
	}
	credit.Amount = 1
	if _, err := operator.Call(ctx, credit); code(err) != protocol.CodeConflict {
		t.Fatalf("same key, other amount: %v", err)
	}
	accept := contract(t, c, buyer, provider, "j-1", 3600)
	commit := seal(t, buyer.key, &protocol.Commit{JobID: "j-1", Provider: provider.id})
	provider.Send(ctx, &protocol.StartNotice{JobID: "j-1", Accept: accept, Commit: commit})
	time.Sleep(1100 * time.Millisecond)
	if _, err := provider.Send(ctx, &protocol.EndNotice{JobID: "j-1", Outcome: protocol.OutcomeCompleted}); err != nil {
		t.Fatal(err)
	}
	earned := c.Ledger.Balance(ledger.Provider(provider.id))
	if _, err := provider.Call(ctx, &protocol.PayoutRequest{Key: "po-1", Amount: earned + 1}); code(err) != protocol.CodeInsufficientFunds {
		t.Fatalf("paying out more than earned: %v", err)
	}
	if _, err := provider.Call(ctx, &protocol.PayoutRequest{Key: "po-1", Amount: earned}); err != nil {
		t.Fatal(err)
	}
	if _, err := buyer.Call(ctx, &protocol.HistoryRequest{Account: ledger.Provider(provider.id)}); code(err) != protocol.CodeForbidden {
		t.Fatalf("reading another peer's history: %v", err)
	}
	reply, err := buyer.Call(ctx, &protocol.HistoryRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if h := reply.(*protocol.History); len(h.Entries) != 4 { // two credits, the hold, the settlement
		t.Fatalf("the buyer's history has %d entries", len(h.Entries))
	}
	if _, err := buyer.Call(ctx, &protocol.VerifyRequest{}); code(err) != protocol.CodeForbidden {
		t.Fatalf("a buyer verifying: %v", err)
	}
	reply, err = operator.Call(ctx, &protocol.VerifyRequest{})
	if r := reply.(*protocol.VerifyReport); err != nil || len(r.Problems) != 0 || r.Entries != 5 || r.HeadHash == "" {
		t.Fatalf("verify: %+v %v", reply, err)
	}
}

func TestLoadRateCard(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "card.json")
		os.WriteFile(p, []byte(s), 0o644)
		return p
	}
	card, err := LoadRateCard(write(`{"tiers":[{"name":"pro","title":"Pro","min_vram_mib":11776,"rate":4500}],"fee_bps":800}`))
	if err != nil || card.Tiers[0].RatePaisePerHour != 4500 || card.FeeBasisPoints != 800 {
		t.Fatalf("%+v %v", card, err)
	}
	for bad, want := range map[string]string{
		`{"tiers":[{"name":"ultra","rate":1}]}`:                       "tiers are",
		`{"tiers":[{"name":"pro","rate":1},{"name":"pro","rate":2}]}`: "twice",
		`{"tiers":[{"name":"pro","rate":0}]}`:                         "above zero",
		`{"tiers":[],"fee_bps":20000}`:                                "fee_bps",
		`{tiers`:                                                      "not valid JSON",
	} {
		if _, err := LoadRateCard(write(bad)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", bad, err, want)
		}
	}
}

// TestReceiptStopsTheMeter: a provider that sends its end notice late
// cannot bill past the moment the buyer heard the run had ended.
func TestReceiptStopsTheMeter(t *testing.T) {
	c, buyer, provider, other := start(t, time.Minute)
	ctx := context.Background()
	accept := contract(t, c, buyer, provider, "j-1", 3600)
	commit := seal(t, buyer.key, &protocol.Commit{JobID: "j-1", Provider: provider.id})
	if _, err := provider.Send(ctx, &protocol.StartNotice{JobID: "j-1", Accept: accept, Commit: commit}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	if _, err := other.Send(ctx, &protocol.ReceiptNotice{JobID: "j-1"}); code(err) != protocol.CodeForbidden {
		t.Fatalf("a receipt from another peer: %v", err)
	}
	if _, err := buyer.Send(ctx, &protocol.ReceiptNotice{JobID: "j-1"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2100 * time.Millisecond) // the provider dawdles
	set, err := provider.Send(ctx, &protocol.EndNotice{JobID: "j-1", Outcome: protocol.OutcomeCompleted})
	if err != nil || set.Seconds != 1 {
		t.Fatalf("billed %d s (%v); the buyer heard the end after 1 s", set.Seconds, err)
	}
}
