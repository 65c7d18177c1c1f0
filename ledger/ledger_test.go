package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trisparc/gaas/money"
	bolt "go.etcd.io/bbolt"
)

func open(t testing.TB, opt *Options) *Ledger {
	t.Helper()
	l, err := Open(filepath.Join(t.TempDir(), "ledger.db"), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func verify(t testing.TB, l *Ledger) Report {
	t.Helper()
	r, err := l.Verify()
	if err != nil || !r.OK() {
		t.Fatalf("verify: %v %v", err, r.Problems)
	}
	return r
}

func TestHoldSettleRelease(t *testing.T) {
	l := open(t, &Options{NoSync: true})
	if _, err := l.Credit("top-up-1", Buyer("b"), 10000, "top-up"); err != nil {
		t.Fatal(err)
	}
	h := Hold{Job: "j1", Buyer: "b", Tier: "pro", Rate: 5000, CapSeconds: 3600, Amount: 5000}
	if _, err := l.PlaceHold(h); err != nil {
		t.Fatal(err)
	}
	if _, err := l.PlaceHold(h); err != nil {
		t.Fatalf("retried hold: %v", err)
	}
	if got := l.Balance(Buyer("b")); got != 5000 {
		t.Fatalf("available after hold = %d, want 5000 (a retry must not hold twice)", got)
	}
	h2 := h
	h2.Amount = 4000
	if _, err := l.PlaceHold(h2); !errors.Is(err, ErrConflict) {
		t.Fatalf("different hold, same job: %v, want ErrConflict", err)
	}
	if _, err := l.PlaceHold(Hold{Job: "j2", Buyer: "b", Rate: 5000, CapSeconds: 7200, Amount: 10000}); !errors.Is(err, ErrInsufficientFunds) {
		t.Fatalf("overdraw: %v, want ErrInsufficientFunds", err)
	}
	if _, err := l.Settle("j1", 60, 1000, "completed"); !errors.Is(err, ErrConflict) {
		t.Fatalf("settling a run that never started: %v", err)
	}
	l.MarkStarted("j1", "p", time.Now())
	s, err := l.Settle("j1", 720, 1000, "completed") // 12 minutes at ₹50/hr = ₹10
	if err != nil || s.Charged != 1000 || s.Fee != 100 || s.ProviderPaid != 900 {
		t.Fatalf("settle: %+v %v", s, err)
	}
	if _, err := l.Settle("j1", 9999, 1000, "completed"); err != nil {
		t.Fatalf("retried settle: %v", err)
	}
	if _, err := l.Release("j1", "x"); !errors.Is(err, ErrConflict) {
		t.Fatalf("release after settle: %v", err)
	}
	if l.Balance(Buyer("b")) != 9000 || l.Balance(Provider("p")) != 900 || l.Balance(Platform) != 100 {
		t.Fatalf("balances %d %d %d", l.Balance(Buyer("b")), l.Balance(Provider("p")), l.Balance(Platform))
	}
	// Over the cap: the seconds stop at the cap.
	l.PlaceHold(Hold{Job: "j4", Buyer: "b", Rate: 5000, CapSeconds: 60, Amount: 83})
	l.MarkStarted("j4", "p", time.Now())
	if s, _ := l.Settle("j4", 1_000_000, 1000, "cap"); s.Seconds != 60 || s.Charged != 83 {
		t.Fatalf("over the cap: %+v", s)
	}
	if _, err := l.Payout("po-1", "p", 10_000); !errors.Is(err, ErrInsufficientFunds) {
		t.Fatalf("payout beyond earnings: %v", err)
	}
	if _, err := l.Payout("po-1", "p", 900); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Credit("top-up-1", Buyer("b"), 1, "changed"); !errors.Is(err, ErrConflict) {
		t.Fatalf("same key, other amount: %v", err)
	}
	if _, err := l.Credit("x", "escrow:j1", 5, ""); !errors.Is(err, ErrBadAccount) {
		t.Fatalf("credit into an escrow: %v", err)
	}
	verify(t, l)
}

func TestFailedRunAllowance(t *testing.T) {
	now := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	l := open(t, &Options{NoSync: true, AllowanceSeconds: 3600, Now: func() time.Time { return now }})
	l.Credit("c", Buyer("b"), 100000, "")
	run := func(job string, secs int64) Hold {
		h, err := l.PlaceHold(Hold{Job: job, Buyer: "b", Rate: 5000, CapSeconds: 7200, Amount: 10000})
		if err != nil {
			t.Fatal(err)
		}
		l.MarkStarted(job, "p", now)
		if h, err = l.SettleFailure(job, secs, 1000, "the script failed"); err != nil {
			t.Fatal(err)
		}
		return h
	}
	h := run("f1", 3000) // within the hour
	if h.Charged != 0 || h.ProviderPaid != 3750 || l.Balance(Buyer("b")) != 100000 || l.Balance(Platform) != -3750 {
		t.Fatalf("subsidised failure: %+v, buyer %d, platform %d", h, l.Balance(Buyer("b")), l.Balance(Platform))
	}
	h = run("f2", 1200) // held with 600 s left: still free, and uses it up
	if h.Charged != 0 || l.AllowanceLeft("b") != 0 {
		t.Fatalf("second failure %+v, left %d", h, l.AllowanceLeft("b"))
	}
	h = run("f3", 720) // held with nothing left: charged, and the hold said so
	if !h.ChargeFailures || h.Charged != 1000 || !strings.Contains(h.Reason, "allowance was used up") {
		t.Fatalf("failure past the allowance: %+v", h)
	}
	now = now.Add(8 * 24 * time.Hour) // a week later the allowance is back
	if l.AllowanceLeft("b") != 3600 {
		t.Fatalf("allowance after a week: %d", l.AllowanceLeft("b"))
	}
	verify(t, l)
}

// TestVerifyCatchesTampering edits the file behind the ledger's back.
func TestVerifyCatchesTampering(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, _ := Open(path, &Options{NoSync: true})
	l.Credit("c", Buyer("b"), 5000, "")
	l.PlaceHold(Hold{Job: "j", Buyer: "b", Rate: 5000, CapSeconds: 3600, Amount: 5000})
	verify(t, l)
	l.db.Update(func(tx *bolt.Tx) error { // rewrite history: the credit was bigger
		e, _ := getEntry(tx, 1)
		e.Legs = []Leg{{External, -9000}, {Buyer("b"), 9000}}
		data, _ := json.Marshal(e)
		return tx.Bucket(bucketJournal).Put(seqKey(1), data)
	})
	r, _ := l.Verify()
	if r.OK() || !strings.Contains(strings.Join(r.Problems, "\n"), "changed after it was written") {
		t.Fatalf("tampering not caught: %v", r.Problems)
	}
	l.Close()
}

// model is the ledger's rules written as plainly as possible.
type model struct {
	bal    map[string]int64
	holds  map[string]*Hold
	keys   map[string]string
	failed map[string][]failedRun
	now    *time.Time
	allow  int64
	feeBps int64
}

func (m *model) allowanceLeft(buyer string) int64 {
	left := m.allow
	for _, r := range m.failed[buyer] {
		if r.At >= m.now.Add(-7*24*time.Hour).UnixMilli() {
			left -= r.Seconds
		}
	}
	return max(left, 0)
}

func (m *model) move(legs ...Leg) {
	for _, l := range legs {
		m.bal[l.Account] += l.Amount
	}
}

// TestProperty runs thousands of random sequences of credit, payout, hold,
// start, settle, failure, release and exact retries against the model,
// checking every balance and hold after every step, and Verify after
// every sequence.
func TestProperty(t *testing.T) {
	sequences := 1500
	if testing.Short() {
		sequences = 100
	}
	buyers, providers := []string{"b1", "b2", "b3"}, []string{"p1", "p2"}
	ops := 0
	for seq := 0; seq < sequences; seq++ {
		rng := rand.New(rand.NewPCG(uint64(seq), 42))
		now := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
		l := open(t, &Options{NoSync: true, AllowanceSeconds: 600, Now: func() time.Time { return now }})
		m := &model{bal: map[string]int64{}, holds: map[string]*Hold{}, keys: map[string]string{}, failed: map[string][]failedRun{}, now: &now, allow: 600, feeBps: 1000}
		var last func() (string, error)
		for step := 0; step < 40; step++ {
			now = now.Add(time.Duration(rng.IntN(3600*6)) * time.Second)
			var op func() (string, error) // returns a description and the ledger's error
			var wantErr error
			buyer := buyers[rng.IntN(len(buyers))]
			prov := providers[rng.IntN(len(providers))]
			job := fmt.Sprintf("j%d", rng.IntN(12))
			secs := int64(rng.IntN(5000))
			switch k := rng.IntN(9); {
			case k == 0 && last != nil:
				op = last // an exact retry
			case k <= 1:
				key, amt := fmt.Sprintf("c%d", rng.IntN(6)), int64(rng.IntN(20000))
				acct := Buyer(buyer)
				op = func() (string, error) {
					_, err := l.Credit(key, acct, amt, "")
					return fmt.Sprintf("credit %s %s %d", key, acct, amt), err
				}
			case k == 2:
				key, amt := fmt.Sprintf("p%d", rng.IntN(4)), int64(rng.IntN(3000)+1)
				op = func() (string, error) {
					_, err := l.Payout(key, prov, amt)
					return fmt.Sprintf("payout %s %s %d", key, prov, amt), err
				}
			case k == 3:
				rate := []int64{3600, 5000, 12000}[rng.IntN(3)]
				capS := int64(rng.IntN(7200) + 1)
				amt, _ := money.Charge(rate, capS)
				amt = max(amt, 1)
				op = func() (string, error) {
					_, err := l.PlaceHold(Hold{Job: job, Buyer: buyer, Tier: "t", Rate: rate, CapSeconds: capS, Amount: amt})
					return fmt.Sprintf("hold %s %s %d %d %d", job, buyer, amt, rate, capS), err
				}
			case k == 4:
				op = func() (string, error) {
					_, err := l.MarkStarted(job, prov, now)
					return "start " + job + " " + prov, err
				}
			case k == 5:
				op = func() (string, error) {
					_, err := l.Settle(job, secs, 1000, "done")
					return fmt.Sprintf("settle %s %d", job, secs), err
				}
			case k == 6:
				op = func() (string, error) {
					_, err := l.SettleFailure(job, secs, 1000, "failed")
					return fmt.Sprintf("fail %s %d", job, secs), err
				}
			default:
				op = func() (string, error) {
					_, err := l.Release(job, "void")
					return "release " + job, err
				}
			}
			desc, err := op()
			wantErr = m.apply(desc)
			ops++
			if (err == nil) != (wantErr == nil) || (err != nil && !errors.Is(err, wantErr)) {
				t.Fatalf("sequence %d step %d: %s: ledger says %v, model says %v", seq, step, desc, err, wantErr)
			}
			last = op
			m.check(t, l, fmt.Sprintf("sequence %d step %d (%s)", seq, step, desc))
		}
		verify(t, l)
		l.Close()
	}
	t.Logf("%d sequences, %d operations, every invariant held after every step", sequences, ops)
}

// apply mirrors one operation, parsed back from its description.
func (m *model) apply(desc string) error {
	f := strings.Fields(desc)
	num := func(i int) int64 {
		var n int64
		fmt.Sscan(f[i], &n)
		return n
	}
	switch f[0] {
	case "credit":
		key, acct, amt := "credit/"+f[1], f[2], num(3)
		if amt <= 0 {
			return ErrBadAmount
		}
		if prev, ok := m.keys[key]; ok {
			if prev != desc {
				return ErrConflict
			}
			return nil
		}
		m.keys[key] = desc
		m.move(Leg{External, -amt}, Leg{acct, amt})
	case "payout":
		key, acct, amt := "payout/"+f[1], Provider(f[2]), num(3)
		if prev, ok := m.keys[key]; ok {
			if prev != desc {
				return ErrConflict
			}
			return nil
		}
		if m.bal[acct] < amt {
			return ErrInsufficientFunds
		}
		m.keys[key] = desc
		m.move(Leg{acct, -amt}, Leg{External, amt})
	case "hold":
		job, buyer, amt := f[1], f[2], num(3)
		rate, capS := num(4), num(5)
		if h, ok := m.holds[job]; ok {
			if h.Buyer != buyer || h.Amount != amt || h.Rate != rate || h.CapSeconds != capS {
				return ErrConflict
			}
			return nil
		}
		if m.bal[Buyer(buyer)] < amt {
			return ErrInsufficientFunds
		}
		m.holds[job] = &Hold{Job: job, Buyer: buyer, Amount: amt, Rate: rate, CapSeconds: capS, State: Held, ChargeFailures: m.allowanceLeft(buyer) <= 0}
		m.move(Leg{Buyer(buyer), -amt}, Leg{Escrow(job), amt})
	case "start":
		h, ok := m.holds[f[1]]
		switch {
		case !ok:
			return ErrNoHold
		case h.State != Held, h.Provider != "" && h.Provider != f[2]:
			return ErrConflict
		}
		h.Provider = f[2]
	case "settle", "fail":
		h, ok := m.holds[f[1]]
		switch {
		case !ok:
			return ErrNoHold
		case h.State == Settled:
			return nil
		case h.State != Held, h.Provider == "":
			return ErrConflict
		}
		secs := min(max(num(2), 0), h.CapSeconds)
		charged, _ := money.Charge(h.Rate, secs)
		charged = min(charged, h.Amount)
		fee, _ := money.Fee(charged, m.feeBps)
		h.State = Settled
		if f[0] == "settle" || h.ChargeFailures {
			m.move(Leg{Escrow(h.Job), -h.Amount}, Leg{Buyer(h.Buyer), h.Amount - charged}, Leg{Provider(h.Provider), charged - fee}, Leg{Platform, fee})
		} else {
			m.move(Leg{Escrow(h.Job), -h.Amount}, Leg{Buyer(h.Buyer), h.Amount}, Leg{Platform, -(charged - fee)}, Leg{Provider(h.Provider), charged - fee})
			m.failed[h.Buyer] = append(m.failed[h.Buyer], failedRun{At: m.now.UnixMilli(), Seconds: secs})
		}
	case "release":
		h, ok := m.holds[f[1]]
		switch {
		case !ok:
			return ErrNoHold
		case h.State == Released:
			return nil
		case h.State != Held:
			return ErrConflict
		}
		h.State = Released
		m.move(Leg{Escrow(h.Job), -h.Amount}, Leg{Buyer(h.Buyer), h.Amount})
	}
	return nil
}

func (m *model) check(t *testing.T, l *Ledger, where string) {
	t.Helper()
	var total int64
	for acct, want := range m.bal {
		if got := l.Balance(acct); got != want {
			t.Fatalf("%s: %s = %d, model %d", where, acct, got, want)
		}
		total += want
		if strings.HasPrefix(acct, "buyer:") && want < 0 {
			t.Fatalf("%s: %s negative", where, acct)
		}
	}
	if total != 0 {
		t.Fatalf("%s: accounts sum to %d", where, total)
	}
	for job, mh := range m.holds {
		h, err := l.Hold(job)
		if err != nil || h.State != mh.State || h.ChargeFailures != mh.ChargeFailures {
			t.Fatalf("%s: hold %s is %+v (%v), model %+v", where, job, h, err, mh)
		}
	}
}

// TestConcurrentHoldsNeverOverdraw races many holds of one buyer.
func TestConcurrentHoldsNeverOverdraw(t *testing.T) {
	l := open(t, &Options{GroupCommit: true})
	l.Credit("c", Buyer("b"), 10000, "")
	var wg sync.WaitGroup
	var mu sync.Mutex
	placed := 0
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if _, err := l.PlaceHold(Hold{Job: fmt.Sprintf("j%d", i), Buyer: "b", Rate: 3600, CapSeconds: 700, Amount: 700}); err == nil {
				mu.Lock()
				placed++
				mu.Unlock()
			} else if !errors.Is(err, ErrInsufficientFunds) {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	if placed != 14 || l.Balance(Buyer("b")) != 200 {
		t.Fatalf("%d holds of 700 placed from 10000, %d left", placed, l.Balance(Buyer("b")))
	}
	verify(t, l)
}

// TestGroupCommitRetriesChangeNothingTwice: under group commit bbolt
// re-runs the batched functions when one of them fails; a failure's
// reason must still be written once.
func TestGroupCommitRetriesChangeNothingTwice(t *testing.T) {
	l := open(t, &Options{GroupCommit: true, NoSync: true})
	l.Credit("c", Buyer("b"), 1_000_000, "")
	for i := 0; i < 40; i++ {
		job := fmt.Sprintf("j%d", i)
		l.PlaceHold(Hold{Job: job, Buyer: "b", Rate: 3600, CapSeconds: 100, Amount: 100})
		l.MarkStarted(job, "p", time.Now())
	}
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(2)
		go func(i int) { defer wg.Done(); l.SettleFailure(fmt.Sprintf("j%d", i), 10, 1000, "failed") }(i)
		go func(i int) { defer wg.Done(); l.Release(fmt.Sprintf("missing%d", i), "x") }(i) // fails, forcing retries
	}
	wg.Wait()
	for i := 0; i < 40; i++ {
		h, _ := l.Hold(fmt.Sprintf("j%d", i))
		if strings.Count(h.Reason, "not charged") != 1 {
			t.Fatalf("reason %q", h.Reason)
		}
	}
	verify(t, l)
}
