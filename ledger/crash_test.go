package ledger

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The crash test: a child process applies a fixed stream of ledger
// operations, as a client that retries until answered would, and is
// killed with SIGKILL at random points many times. After every kill the
// ledger must verify; at the end it must equal the same stream applied
// once, without crashes: nothing lost, nothing applied twice.

const crashOps = 8000

// crashOp applies operation i of the stream. Business refusals (an
// overdraw, a settled hold) are answers too.
func crashOp(l *Ledger, i int) error {
	buyer := fmt.Sprintf("b%d", (i/6)%3) // the same buyer for a whole round of six
	job := func(k int) string { return fmt.Sprintf("j%d", k) }
	var err error
	switch i % 6 {
	case 0:
		_, err = l.Credit(fmt.Sprintf("c%d", i), Buyer(buyer), 2000, "top-up")
	case 1:
		_, err = l.PlaceHold(Hold{Job: job(i), Buyer: buyer, Rate: 5000, CapSeconds: 600, Amount: 833})
	case 2:
		_, err = l.MarkStarted(job(i-1), "p", time.UnixMilli(int64(i)))
	case 3:
		_, err = l.Settle(job(i-2), int64(i%600), 1000, "done")
	case 4:
		_, err = l.SettleFailure(job(i-9), int64(i%300), 1000, "failed")
	case 5:
		_, err = l.Payout(fmt.Sprintf("p%d", i), "p", 100)
	}
	if err != nil && !errors.Is(err, ErrInsufficientFunds) && !errors.Is(err, ErrConflict) && !errors.Is(err, ErrNoHold) {
		return err
	}
	return nil
}

// crashClient runs in the child: it applies the stream from the
// operation after the last one it was sure of, appending each answered
// operation's number to the ack file.
func crashClient(dir string) {
	acks, _ := os.ReadFile(filepath.Join(dir, "acks"))
	next := 0
	if f := strings.Fields(string(acks)); len(f) > 0 {
		n, _ := strconv.Atoi(f[len(f)-1])
		next = n + 1
	}
	// Retry the last acknowledged one too: a client cannot always tell.
	next = max(0, next-1)
	now := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	l, err := Open(filepath.Join(dir, "ledger.db"), &Options{Now: func() time.Time { return now }})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ack, _ := os.OpenFile(filepath.Join(dir, "acks"), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	for i := next; i < crashOps; i++ {
		if err := crashOp(l, i); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Fprintf(ack, "%d\n", i)
		ack.Sync()
	}
	l.Close()
	os.Exit(0)
}

func ackCount(dir string) int {
	data, _ := os.ReadFile(filepath.Join(dir, "acks"))
	return strings.Count(string(data), "\n")
}

func TestCrashRecovery(t *testing.T) {
	if dir := os.Getenv("GAAS_LEDGER_CRASH_DIR"); dir != "" {
		crashClient(dir)
	}
	if testing.Short() {
		t.Skip("kills a child process many times")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 7))
	kills := 0
	for run := 0; ; run++ {
		if run > 500 {
			t.Fatal("the stream never finished")
		}
		child := exec.Command(os.Args[0], "-test.run", "^TestCrashRecovery$")
		child.Env = append(os.Environ(), "GAAS_LEDGER_CRASH_DIR="+dir)
		child.Stderr = os.Stderr
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- child.Wait() }()
		// Kill only once this run has made progress, at a random point
		// after it; after enough kills, let the stream finish.
		acked := ackCount(dir)
		progressed := make(chan struct{})
		go func() {
			for ackCount(dir) == acked {
				select {
				case <-done:
					return
				case <-time.After(time.Millisecond):
				}
			}
			close(progressed)
		}()
		finished := false
		killAt := make(<-chan time.Time)
		for !finished && killAt != nil {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("the client failed: %v", err)
				}
				finished = true
			case <-progressed:
				progressed = nil
				if kills < 60 {
					killAt = time.After(time.Duration(rng.IntN(80)) * time.Millisecond)
				}
			case <-killAt:
				child.Process.Signal(syscall.SIGKILL)
				<-done
				kills++
				killAt = nil
			}
		}
		l, err := Open(filepath.Join(dir, "ledger.db"), nil)
		if err != nil {
			t.Fatalf("after kill %d: %v", kills, err)
		}
		r, err := l.Verify()
		l.Close()
		if err != nil || !r.OK() {
			t.Fatalf("after kill %d the ledger does not verify: %v %v", kills, err, r.Problems)
		}
		if finished {
			break
		}
	}
	// The same stream once, with no crash, must give the same ledger.
	now := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	want := open(t, &Options{NoSync: true, Now: func() time.Time { return now }})
	for i := 0; i < crashOps; i++ {
		if err := crashOp(want, i); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Open(filepath.Join(dir, "ledger.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	wantEntries, _ := want.Journal()
	gotEntries, _ := got.Journal()
	if len(gotEntries) != len(wantEntries) {
		t.Fatalf("after %d kills the journal has %d entries; applied once it has %d", kills, len(gotEntries), len(wantEntries))
	}
	for _, a := range []string{Buyer("b0"), Buyer("b1"), Buyer("b2"), Provider("p"), Platform, External} {
		if got.Balance(a) != want.Balance(a) {
			t.Fatalf("%s = %d after %d kills, %d applied once", a, got.Balance(a), kills, want.Balance(a))
		}
	}
	if kills < 20 {
		t.Fatalf("only %d kills: the test proved little", kills)
	}
	t.Logf("%d operations, killed with SIGKILL %d times, verified after each; %d entries, same as one clean run", crashOps, kills, len(gotEntries))
}
