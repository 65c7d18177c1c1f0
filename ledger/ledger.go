// Package ledger is the coordinator's double-entry ledger in bbolt: buyer
// balances, per-job escrow holds, provider earnings and the platform's fee
// account. Every journal entry sums to zero and every hold is resolved
// exactly once.
package ledger

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/trisparc/gaas/money"
	bolt "go.etcd.io/bbolt"
)

// Errors callers check with errors.Is.
var (
	// ErrInsufficientFunds: the buyer's available balance is below the hold.
	ErrInsufficientFunds = errors.New("insufficient funds")
	// ErrNoHold: no hold exists for the job.
	ErrNoHold = errors.New("no hold for this job")
	// ErrConflict: a request reused a job's key with different content, or
	// tried to resolve a hold that is already resolved.
	ErrConflict = errors.New("conflicts with an earlier request for this job")
	// ErrBadAmount: an amount is zero or negative where it must be positive.
	ErrBadAmount = errors.New("amount must be positive")
)

// Account names.
const (
	External = "external"      // money entering or leaving the market
	Platform = "platform:fees" // the platform's fee account
)

// Buyer is a buyer's available balance.
func Buyer(peerID string) string { return "buyer:" + peerID }

// Provider is a provider's earnings.
func Provider(peerID string) string { return "provider:" + peerID }

// Escrow is a job's held funds.
func Escrow(job string) string { return "escrow:" + job }

// Hold states.
const (
	Held     = "held"
	Settled  = "settled"
	Released = "released"
)

// Hold is one job's escrow and how it was resolved.
type Hold struct {
	Job        string `json:"job"`
	Buyer      string `json:"buyer"`
	Tier       string `json:"tier"`
	Rate       int64  `json:"rate"` // paise per hour
	CapSeconds int64  `json:"cap_s"`
	Amount     int64  `json:"amount"`
	State      string `json:"state"`
	Provider   string `json:"provider,omitempty"`
	StartedAt  int64  `json:"started_at,omitempty"` // Unix ms, coordinator's clock
	EndedAt    int64  `json:"ended_at,omitempty"`
	Seconds    int64  `json:"seconds,omitempty"`
	Charged    int64  `json:"charged,omitempty"`
	Fee        int64  `json:"fee,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// Leg is one account's side of an entry.
type Leg struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

// Entry is one balanced journal entry.
type Entry struct {
	Seq    uint64 `json:"seq"`
	At     int64  `json:"at"`
	Kind   string `json:"kind"`
	Job    string `json:"job,omitempty"`
	Reason string `json:"reason,omitempty"`
	Legs   []Leg  `json:"legs"`
}

var (
	bucketAccounts = []byte("accounts")
	bucketHolds    = []byte("holds")
	bucketJournal  = []byte("journal")
)

// Ledger is an open ledger file.
type Ledger struct {
	db  *bolt.DB
	now func() time.Time
}

// Open opens or creates the ledger at path.
func Open(path string) (*Ledger, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("opening ledger %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketAccounts, bucketHolds, bucketJournal} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("preparing ledger %s: %w", path, err)
	}
	return &Ledger{db: db, now: time.Now}, nil
}

// Close closes the file.
func (l *Ledger) Close() error { return l.db.Close() }

// Credit moves money from outside the market into an account.
func (l *Ledger) Credit(account string, amount int64, reason string) error {
	if amount <= 0 {
		return ErrBadAmount
	}
	return l.db.Update(func(tx *bolt.Tx) error {
		return l.post(tx, Entry{Kind: "credit", Reason: reason, Legs: []Leg{{External, -amount}, {account, amount}}})
	})
}

// PlaceHold moves h.Amount from the buyer to the job's escrow. Placing the
// same hold again returns the first one; a different hold for the same job
// is ErrConflict.
func (l *Ledger) PlaceHold(h Hold) (Hold, error) {
	if h.Amount <= 0 {
		return Hold{}, ErrBadAmount
	}
	h.State = Held
	err := l.db.Update(func(tx *bolt.Tx) error {
		if prev, ok, err := getHold(tx, h.Job); err != nil {
			return err
		} else if ok {
			if prev.Buyer != h.Buyer || prev.Amount != h.Amount || prev.Rate != h.Rate || prev.CapSeconds != h.CapSeconds {
				return ErrConflict
			}
			h = prev
			return nil
		}
		if balance(tx, Buyer(h.Buyer)) < h.Amount {
			return ErrInsufficientFunds
		}
		if err := l.post(tx, Entry{Kind: "hold", Job: h.Job, Legs: []Leg{{Buyer(h.Buyer), -h.Amount}, {Escrow(h.Job), h.Amount}}}); err != nil {
			return err
		}
		return putHold(tx, h)
	})
	return h, err
}

// Hold returns a job's hold.
func (l *Ledger) Hold(job string) (Hold, error) {
	var h Hold
	err := l.db.View(func(tx *bolt.Tx) error {
		var ok bool
		var err error
		h, ok, err = getHold(tx, job)
		if err == nil && !ok {
			err = ErrNoHold
		}
		return err
	})
	return h, err
}

// MarkStarted records when metering of a held job began and who runs it.
// A second start for the same provider is a no-op; for another, ErrConflict.
func (l *Ledger) MarkStarted(job, provider string, at time.Time) (Hold, error) {
	return l.updateHold(job, func(tx *bolt.Tx, h *Hold) error {
		if h.State != Held {
			return ErrConflict
		}
		if h.StartedAt != 0 {
			if h.Provider != provider {
				return ErrConflict
			}
			return nil
		}
		h.Provider, h.StartedAt = provider, at.UnixMilli()
		return nil
	})
}

// Settle charges a held job for seconds of work (capped at its cap): the
// buyer pays the charge, the provider gets it less the fee, the platform
// the fee, and the rest of the hold returns to the buyer. Settling a job
// that is already settled returns it unchanged.
func (l *Ledger) Settle(job string, seconds, feeBasisPoints int64, reason string) (Hold, error) {
	return l.updateHold(job, func(tx *bolt.Tx, h *Hold) error {
		if h.State == Settled {
			return nil
		}
		if h.State != Held {
			return ErrConflict
		}
		if h.Provider == "" {
			return fmt.Errorf("settling %s: the run never started: %w", job, ErrConflict)
		}
		seconds = min(max(seconds, 0), h.CapSeconds)
		charge, err := money.Charge(h.Rate, seconds)
		if err != nil {
			return err
		}
		charge = min(charge, h.Amount)
		fee, err := money.Fee(charge, feeBasisPoints)
		if err != nil {
			return err
		}
		legs := []Leg{{Escrow(job), -h.Amount}, {Buyer(h.Buyer), h.Amount - charge}, {Provider(h.Provider), charge - fee}, {Platform, fee}}
		if err := l.post(tx, Entry{Kind: "settle", Job: job, Reason: reason, Legs: legs}); err != nil {
			return err
		}
		h.State, h.Seconds, h.Charged, h.Fee, h.Reason = Settled, seconds, charge, fee, reason
		h.EndedAt = l.now().UnixMilli()
		return nil
	})
}

// Release returns a whole hold to the buyer: nobody is charged. Releasing
// a released hold returns it unchanged.
func (l *Ledger) Release(job, reason string) (Hold, error) {
	return l.updateHold(job, func(tx *bolt.Tx, h *Hold) error {
		if h.State == Released {
			return nil
		}
		if h.State != Held {
			return ErrConflict
		}
		legs := []Leg{{Escrow(job), -h.Amount}, {Buyer(h.Buyer), h.Amount}}
		if err := l.post(tx, Entry{Kind: "release", Job: job, Reason: reason, Legs: legs}); err != nil {
			return err
		}
		h.State, h.Reason, h.EndedAt = Released, reason, l.now().UnixMilli()
		return nil
	})
}

// Balance returns an account's balance.
func (l *Ledger) Balance(account string) int64 {
	var b int64
	l.db.View(func(tx *bolt.Tx) error { b = balance(tx, account); return nil })
	return b
}

// HeldFor sums a buyer's unresolved holds.
func (l *Ledger) HeldFor(buyer string) int64 {
	var total int64
	l.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketHolds).ForEach(func(_, v []byte) error {
			var h Hold
			if json.Unmarshal(v, &h) == nil && h.Buyer == buyer && h.State == Held {
				total += h.Amount
			}
			return nil
		})
	})
	return total
}

// OpenHolds returns the holds not yet resolved.
func (l *Ledger) OpenHolds() ([]Hold, error) {
	var out []Hold
	err := l.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketHolds).ForEach(func(_, v []byte) error {
			var h Hold
			if err := json.Unmarshal(v, &h); err != nil {
				return err
			}
			if h.State == Held {
				out = append(out, h)
			}
			return nil
		})
	})
	return out, err
}

// Journal returns every entry in order.
func (l *Ledger) Journal() ([]Entry, error) {
	var out []Entry
	err := l.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketJournal).ForEach(func(_, v []byte) error {
			var e Entry
			if err := json.Unmarshal(v, &e); err != nil {
				return err
			}
			out = append(out, e)
			return nil
		})
	})
	return out, err
}

func (l *Ledger) updateHold(job string, change func(*bolt.Tx, *Hold) error) (Hold, error) {
	var h Hold
	err := l.db.Update(func(tx *bolt.Tx) error {
		var ok bool
		var err error
		if h, ok, err = getHold(tx, job); err != nil {
			return err
		} else if !ok {
			return ErrNoHold
		}
		if err := change(tx, &h); err != nil {
			return err
		}
		return putHold(tx, h)
	})
	return h, err
}

// post applies a balanced entry inside tx.
func (l *Ledger) post(tx *bolt.Tx, e Entry) error {
	var sum int64
	for _, leg := range e.Legs {
		sum += leg.Amount
	}
	if sum != 0 {
		return fmt.Errorf("ledger entry %s for %q does not balance (off by %d)", e.Kind, e.Job, sum)
	}
	accounts := tx.Bucket(bucketAccounts)
	for _, leg := range e.Legs {
		var v [8]byte
		binary.BigEndian.PutUint64(v[:], uint64(balance(tx, leg.Account)+leg.Amount))
		if err := accounts.Put([]byte(leg.Account), v[:]); err != nil {
			return err
		}
	}
	journal := tx.Bucket(bucketJournal)
	seq, err := journal.NextSequence()
	if err != nil {
		return err
	}
	e.Seq, e.At = seq, l.now().UnixMilli()
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], seq)
	return journal.Put(k[:], data)
}

func balance(tx *bolt.Tx, account string) int64 {
	v := tx.Bucket(bucketAccounts).Get([]byte(account))
	if len(v) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v))
}

func getHold(tx *bolt.Tx, job string) (Hold, bool, error) {
	v := tx.Bucket(bucketHolds).Get([]byte(job))
	if v == nil {
		return Hold{}, false, nil
	}
	var h Hold
	if err := json.Unmarshal(v, &h); err != nil {
		return Hold{}, false, fmt.Errorf("reading hold %s: %w", job, err)
	}
	return h, true, nil
}

func putHold(tx *bolt.Tx, h Hold) error {
	data, err := json.Marshal(h)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketHolds).Put([]byte(h.Job), data)
}
