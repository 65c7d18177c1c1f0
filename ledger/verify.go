package ledger

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// Report is what Verify found.
type Report struct {
	Entries   uint64   `json:"entries"`
	Accounts  int      `json:"accounts"`
	Holds     int      `json:"holds"`
	OpenHolds int      `json:"open_holds"`
	HeadSeq   uint64   `json:"head_seq"`
	HeadHash  string   `json:"head_hash"`
	Problems  []string `json:"problems"`
}

// OK reports whether every invariant held.
func (r Report) OK() bool { return len(r.Problems) == 0 }

// Verify re-walks the journal from the first entry and checks every
// invariant: the hash chain is intact and ends at the stored head; every
// entry balances; no buyer's available balance ever went negative; every
// hold was placed once and resolved at most once, and at most one
// settlement was posted per job; the balances equal a replay of the
// journal; and all accounts together sum to zero.
func (l *Ledger) Verify() (Report, error) {
	var r Report
	err := l.db.View(func(tx *bolt.Tx) error {
		problem := func(format string, args ...any) {
			if len(r.Problems) < 100 {
				r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
			}
		}
		replay := map[string]int64{}
		placed := map[string]int{}
		resolved := map[string]string{}
		prev, want := "", uint64(1)
		err := tx.Bucket(bucketJournal).ForEach(func(k, v []byte) error {
			var e Entry
			if err := json.Unmarshal(v, &e); err != nil {
				problem("entry %x does not decode: %v", k, err)
				return nil
			}
			r.Entries++
			if e.Seq != want {
				problem("entry %d follows %d: the journal has a gap or is out of order", e.Seq, want-1)
			}
			want = e.Seq + 1
			if e.PrevHash != prev {
				problem("entry %d does not chain to the entry before it", e.Seq)
			}
			if e.computeHash() != e.Hash {
				problem("entry %d was changed after it was written (its hash does not match)", e.Seq)
			}
			prev = e.Hash
			var sum int64
			for _, leg := range e.Legs {
				sum += leg.Amount
				replay[leg.Account] += leg.Amount
				if strings.HasPrefix(leg.Account, "buyer:") && replay[leg.Account] < 0 {
					problem("entry %d overdraws %s to %d", e.Seq, leg.Account, replay[leg.Account])
				}
			}
			if sum != 0 {
				problem("entry %d does not balance (off by %d)", e.Seq, sum)
			}
			switch e.Kind {
			case KindHold:
				placed[e.Job]++
				if placed[e.Job] > 1 {
					problem("job %s was held %d times", e.Job, placed[e.Job])
				}
			case KindSettle, KindSettleFailure, KindRelease:
				if earlier, ok := resolved[e.Job]; ok {
					problem("job %s was resolved twice (%s, then %s in entry %d)", e.Job, earlier, e.Kind, e.Seq)
				}
				resolved[e.Job] = e.Kind
				if placed[e.Job] == 0 {
					problem("job %s was resolved in entry %d without a hold", e.Job, e.Seq)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		r.HeadSeq, r.HeadHash = head(tx)
		if r.HeadSeq != r.Entries || r.HeadHash != prev {
			problem("the stored head (%d, %.12s) is not the last entry (%d, %.12s)", r.HeadSeq, r.HeadHash, r.Entries, prev)
		}
		stored := map[string]int64{}
		var total int64
		tx.Bucket(bucketAccounts).ForEach(func(k, v []byte) error {
			stored[string(k)] = balance(tx, string(k))
			total += stored[string(k)]
			return nil
		})
		r.Accounts = len(stored)
		if total != 0 {
			problem("all accounts together sum to %d, not zero", total)
		}
		names := map[string]bool{}
		for a := range stored {
			names[a] = true
		}
		for a := range replay {
			names[a] = true
		}
		sorted := make([]string, 0, len(names))
		for a := range names {
			sorted = append(sorted, a)
		}
		sort.Strings(sorted)
		for _, a := range sorted {
			if stored[a] != replay[a] {
				problem("%s holds %d but the journal adds up to %d", a, stored[a], replay[a])
			}
			if strings.HasPrefix(a, "buyer:") && stored[a] < 0 {
				problem("%s is negative (%d)", a, stored[a])
			}
		}
		return tx.Bucket(bucketHolds).ForEach(func(k, v []byte) error {
			var h Hold
			if err := json.Unmarshal(v, &h); err != nil {
				problem("hold %s does not decode", k)
				return nil
			}
			r.Holds++
			if indexed := tx.Bucket(bucketOpen).Get(k) != nil; indexed != (h.State == Held) {
				problem("hold %s is %s but the open-hold index says otherwise", h.Job, h.State)
			}
			escrow := stored[Escrow(h.Job)]
			switch {
			case placed[h.Job] != 1:
				problem("hold %s has %d hold entries", h.Job, placed[h.Job])
			case h.State == Held:
				r.OpenHolds++
				if _, ok := resolved[h.Job]; ok || escrow != h.Amount {
					problem("hold %s is open but its escrow holds %d of %d", h.Job, escrow, h.Amount)
				}
			case resolved[h.Job] == "":
				problem("hold %s is %s but no entry resolved it", h.Job, h.State)
			case escrow != 0:
				problem("hold %s is %s but its escrow still holds %d", h.Job, h.State, escrow)
			}
			return nil
		})
	})
	return r, err
}
