package ledger

import (
	"errors"
	"path/filepath"
	"testing"
	"time"
)

func open(t testing.TB) *Ledger {
	t.Helper()
	l, err := Open(filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// checkBalanced fails the test unless every account sums to zero.
func checkBalanced(t *testing.T, l *Ledger, accounts ...string) {
	t.Helper()
	var sum int64
	for _, a := range append(accounts, External, Platform) {
		sum += l.Balance(a)
	}
	if sum != 0 {
		t.Fatalf("accounts sum to %d, want 0", sum)
	}
}

func TestHoldSettleRelease(t *testing.T) {
	l := open(t)
	if err := l.Credit(Buyer("b"), 10000, "top-up"); err != nil {
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
		t.Fatalf("available after hold = %d, want 5000 (retry must not hold twice)", got)
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
	if _, err := l.MarkStarted("j1", "p", time.Now()); err != nil {
		t.Fatal(err)
	}
	s, err := l.Settle("j1", 720, 1000, "completed") // 12 minutes at ₹50/hr = ₹10
	if err != nil {
		t.Fatal(err)
	}
	if s.Charged != 1000 || s.Fee != 100 {
		t.Fatalf("charged %d fee %d, want 1000 and 100", s.Charged, s.Fee)
	}
	if _, err := l.Settle("j1", 720, 1000, "completed"); err != nil {
		t.Fatalf("retried settle: %v", err)
	}
	if _, err := l.Release("j1", "x"); !errors.Is(err, ErrConflict) {
		t.Fatalf("release after settle: %v", err)
	}
	if got := l.Balance(Buyer("b")); got != 9000 {
		t.Fatalf("buyer = %d, want 9000", got)
	}
	if got := l.Balance(Provider("p")); got != 900 {
		t.Fatalf("provider = %d, want 900", got)
	}
	checkBalanced(t, l, Buyer("b"), Provider("p"), Escrow("j1"))

	if _, err := l.PlaceHold(Hold{Job: "j3", Buyer: "b", Rate: 5000, CapSeconds: 3600, Amount: 5000}); err != nil {
		t.Fatal(err)
	}
	if l.HeldFor("b") != 5000 {
		t.Fatalf("held = %d", l.HeldFor("b"))
	}
	if _, err := l.Release("j3", "script failed"); err != nil {
		t.Fatal(err)
	}
	if got := l.Balance(Buyer("b")); got != 9000 {
		t.Fatalf("buyer after release = %d, want 9000", got)
	}
	checkBalanced(t, l, Buyer("b"), Provider("p"), Escrow("j1"), Escrow("j3"))

	// Settling caps the seconds at the job's cap.
	l.PlaceHold(Hold{Job: "j4", Buyer: "b", Rate: 5000, CapSeconds: 60, Amount: 83})
	l.MarkStarted("j4", "p", time.Now())
	if s, _ := l.Settle("j4", 1_000_000, 1000, "cap"); s.Seconds != 60 || s.Charged != 83 {
		t.Fatalf("over the cap: %+v", s)
	}
	entries, err := l.Journal()
	if err != nil || len(entries) != 7 {
		t.Fatalf("journal has %d entries (%v), want 7", len(entries), err)
	}
}
