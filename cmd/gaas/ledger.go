package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/trisparc/gaas/coordinator"
	"github.com/trisparc/gaas/money"
	"github.com/trisparc/gaas/p2p"
	"github.com/trisparc/gaas/protocol"
)

func (c *cli) ledger(ctx context.Context, args []string) error {
	if len(args) == 0 {
		c.help([]string{"ledger"})
		return usagef("ledger: say what to do: balance, history, payout, credit or verify")
	}
	switch args[0] {
	case "balance":
		return c.ledgerBalance(ctx, args[1:])
	case "history":
		return c.ledgerHistory(ctx, args[1:])
	case "payout":
		return c.ledgerPayout(ctx, args[1:])
	case "credit":
		return c.ledgerCredit(ctx, args[1:])
	case "verify":
		return c.ledgerVerify(ctx, args[1:])
	}
	return usagef("ledger: unknown subcommand %q (balance, history, payout, credit, verify)", args[0])
}

func (c *cli) ledgerBalance(ctx context.Context, args []string) error {
	f := c.flags("ledger balance")
	cf := f.client()
	asJSON := f.Bool("json", false, "print JSON")
	if _, err := f.parse(args); err != nil {
		return err
	}
	b, err := cf.client().Balance(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(c.stdout).Encode(b)
	}
	fmt.Fprintf(c.stdout, "Available  %s\nHeld       %s (for jobs in progress)\nEarned     %s (as a provider, not yet paid out)\n", b.AvailableDisplay, b.HeldDisplay, b.EarnedDisplay)
	fmt.Fprintf(c.stdout, "Failed runs: %s\n", allowanceLine(b.FailedAllowanceSeconds))
	return nil
}

// allowanceLine says whether a failed run would be charged.
func allowanceLine(left int64) string {
	if left <= 0 {
		return "charged: this week's free failed-run allowance is used up"
	}
	return fmt.Sprintf("not charged (%s of this week's free allowance left)", formatDuration(left))
}

func (c *cli) ledgerHistory(ctx context.Context, args []string) error {
	f := c.flags("ledger history")
	cf := f.client()
	asJSON := f.Bool("json", false, "print JSON")
	if _, err := f.parse(args); err != nil {
		return err
	}
	h, err := cf.client().History(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(c.stdout).Encode(h)
	}
	if len(h) == 0 {
		fmt.Fprintln(c.stdout, "No ledger entries yet.")
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tWHEN\tKIND\tJOB\tCHANGES\tREASON")
	for _, e := range h {
		var legs []string
		for _, l := range e.Legs {
			legs = append(legs, fmt.Sprintf("%s %s", l.Account, signed(l.Amount)))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", e.Seq, e.At.Local().Format("2006-01-02 15:04:05"), e.Kind, e.Job, strings.Join(legs, ", "), e.Reason)
	}
	return tw.Flush()
}

func signed(p int64) string {
	if p > 0 {
		return "+" + money.Format(p)
	}
	return money.Format(p)
}

func newKey() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (c *cli) ledgerPayout(ctx context.Context, args []string) error {
	f := c.flags("ledger payout")
	cf := f.client()
	key := f.String("key", "", "idempotency key: the same key never pays out twice (default: a new one)")
	rest, err := f.parse(args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usagef("ledger payout: give the amount in rupees, like: gaas ledger payout 250")
	}
	amount, err := money.Parse(rest[0])
	if err != nil {
		return usagef("ledger payout: %v", err)
	}
	if *key == "" {
		*key = newKey()
	}
	e, err := cf.client().Payout(ctx, amount, *key)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "Paid out %s (ledger entry #%d, key %s)\n", money.Format(amount), e.Seq, *key)
	return nil
}

// operatorFlags are what an operator's commands need: the coordinator
// and the operator's key.
type operatorFlags struct{ coordinator, key *string }

func (f *flags) operator() operatorFlags {
	return operatorFlags{
		coordinator: f.string("coordinator", "GAAS_COORDINATOR", "", "the coordinator's address, ending in /p2p/PEER_ID"),
		key:         f.string("operator-key", "GAAS_OPERATOR_KEY", "", "the operator's identity key file"),
	}
}

// call sends one request to the coordinator, signed with the operator key.
func (o operatorFlags) call(ctx context.Context, req protocol.Message) (protocol.Message, error) {
	if *o.coordinator == "" || *o.key == "" {
		return nil, usagef("this is an operator's command: give --coordinator ADDR and --operator-key FILE (or GAAS_COORDINATOR and GAAS_OPERATOR_KEY; gaas testnet prints both)")
	}
	infos, err := p2p.ParseAddrs([]string{*o.coordinator})
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(*o.key)
	if err != nil {
		return nil, fmt.Errorf("cannot read the operator key: %v", err)
	}
	key, err := crypto.UnmarshalPrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("%s is not an identity key: %v", *o.key, err)
	}
	peer, err := p2p.Start(p2p.Config{Key: key, Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		return nil, err
	}
	defer peer.Close()
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := peer.Host.Connect(cctx, infos[0]); err != nil {
		return nil, fmt.Errorf("could not reach the coordinator at %s: %v", *o.coordinator, err)
	}
	cl := &coordinator.Client{Peer: peer, Coordinator: infos[0].ID}
	reply, err := cl.Call(cctx, req)
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return nil, errors.New(pe.Message)
	}
	return reply, err
}

func (c *cli) ledgerCredit(ctx context.Context, args []string) error {
	f := c.flags("ledger credit")
	op := f.operator()
	key := f.String("key", "", "idempotency key: the same key never credits twice (default: a new one, printed)")
	reason := f.String("reason", "operator credit", "why, kept with the entry")
	rest, err := f.parse(args)
	if err != nil {
		return err
	}
	if len(rest) != 2 {
		return usagef("ledger credit: give the account and the amount in rupees, like: gaas ledger credit buyer:12D3Koo... 500")
	}
	account := rest[0]
	if !strings.Contains(account, ":") {
		account = "buyer:" + account // a bare peer ID is a buyer's account
	}
	amount, err := money.Parse(rest[1])
	if err != nil {
		return usagef("ledger credit: %v", err)
	}
	if *key == "" {
		*key = newKey()
	}
	reply, err := op.call(ctx, &protocol.CreditRequest{Key: *key, Account: account, Amount: amount, Reason: *reason})
	if err != nil {
		return err
	}
	p, ok := reply.(*protocol.Posted)
	if !ok {
		return fmt.Errorf("the coordinator answered with %s", reply.Kind())
	}
	fmt.Fprintf(c.stdout, "Credited %s to %s (ledger entry #%d, key %s: reuse it to retry safely)\n", money.Format(amount), account, p.Entry.Seq, *key)
	return nil
}

func (c *cli) ledgerVerify(ctx context.Context, args []string) error {
	f := c.flags("ledger verify")
	op := f.operator()
	asJSON := f.Bool("json", false, "print JSON")
	if _, err := f.parse(args); err != nil {
		return err
	}
	reply, err := op.call(ctx, &protocol.VerifyRequest{})
	if err != nil {
		return err
	}
	r, ok := reply.(*protocol.VerifyReport)
	if !ok {
		return fmt.Errorf("the coordinator answered with %s", reply.Kind())
	}
	if *asJSON {
		json.NewEncoder(c.stdout).Encode(r)
	} else {
		fmt.Fprintf(c.stdout, "Journal   %d entries, hash chain intact to head #%d %s (signed by the coordinator)\n", r.Entries, r.HeadSeq, r.HeadHash)
		fmt.Fprintf(c.stdout, "Accounts  %d, summing to zero; no buyer below zero; balances equal a replay of the journal\n", r.Accounts)
		fmt.Fprintf(c.stdout, "Holds     %d (%d open), each placed once and resolved at most once\n", r.Holds, r.OpenHolds)
		for _, p := range r.Problems {
			fmt.Fprintf(c.stdout, "PROBLEM   %s\n", p)
		}
	}
	if len(r.Problems) > 0 {
		fmt.Fprintf(c.stderr, "gaas: the ledger has %d problems\n", len(r.Problems))
		return &exitError{code: 1}
	}
	if !*asJSON {
		fmt.Fprintln(c.stdout, "Verified: every invariant holds.")
	}
	return nil
}
