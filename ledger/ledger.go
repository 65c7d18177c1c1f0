// Package ledger is the coordinator's double-entry ledger in bbolt: buyer
// balances, per-job escrow holds, provider earnings and the platform's fee
// account. Every journal entry sums to zero, is hash-chained to the one
// before it, and is never changed; every hold is resolved exactly once; a
// retried request with the same key changes nothing.
package ledger

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/trisparc/gaas/money"
	bolt "go.etcd.io/bbolt"
)

// Errors callers check with errors.Is.
var (
	// ErrInsufficientFunds: the account's balance is below the amount.
	ErrInsufficientFunds = errors.New("insufficient funds")
	// ErrNoHold: no hold exists for the job.
	ErrNoHold = errors.New("no hold for this job")
	// ErrConflict: a request reused a key with different content, or tried
	// to resolve a hold that is already resolved another way.
	ErrConflict = errors.New("conflicts with an earlier request with the same key")
	// ErrBadAmount: an amount is zero or negative where it must be positive.
	ErrBadAmount = errors.New("amount must be positive")
	// ErrBadAccount: the account name is not one money may be moved to.
	ErrBadAccount = errors.New("no such account")
)

// Account names.
const (
	External = "external"      // money entering or leaving the market
	Platform = "platform:fees" // the platform's fee account
)

// Buyer is a buyer's available balance.
func Buyer(peerID string) string { return "buyer:" + peerID }

// Provider is a provider's payable balance: what it has earned and not
// yet been paid out.
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
	// ChargeFailures is set when the buyer's failed-run allowance was used
	// up as the job was held (and the buyer was told): a run the script
	// fails is then charged like any other.
	ChargeFailures bool   `json:"charge_failures,omitempty"`
	State          string `json:"state"`
	PlacedAt       int64  `json:"placed_at,omitempty"` // Unix ms
	Provider       string `json:"provider,omitempty"`
	StartedAt      int64  `json:"started_at,omitempty"` // Unix ms, coordinator's clock
	StoppedAt      int64  `json:"stopped_at,omitempty"` // the buyer's receipt of the end, if it came first
	EndedAt        int64  `json:"ended_at,omitempty"`
	Seconds        int64  `json:"seconds,omitempty"`
	Charged        int64  `json:"charged,omitempty"`
	Fee            int64  `json:"fee,omitempty"`
	ProviderPaid   int64  `json:"provider_paid,omitempty"`
	Reason         string `json:"reason,omitempty"`
}

// Leg is one account's side of an entry.
type Leg struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

// Entry is one balanced journal entry. Hash covers PrevHash and every
// other field, so no entry can change without breaking the chain.
type Entry struct {
	Seq      uint64 `json:"seq"`
	At       int64  `json:"at"`
	Kind     string `json:"kind"`
	Key      string `json:"key"`
	Job      string `json:"job,omitempty"`
	Reason   string `json:"reason"`
	Legs     []Leg  `json:"legs"`
	PrevHash string `json:"prev"`
	Hash     string `json:"hash,omitempty"`
}

// Entry kinds.
const (
	KindCredit        = "credit"
	KindPayout        = "payout"
	KindHold          = "hold"
	KindSettle        = "settle"
	KindSettleFailure = "settle_failure" // the platform pays the provider
	KindRelease       = "release"
)

func (e Entry) computeHash() string {
	e.Hash = ""
	data, _ := json.Marshal(e)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

var (
	bucketAccounts = []byte("accounts")
	bucketHolds    = []byte("holds")
	bucketJournal  = []byte("journal")
	bucketKeys     = []byte("keys")   // idempotency key → request digest and entry seq
	bucketFailed   = []byte("failed") // buyer → failed-run seconds, for the allowance
	bucketMeta     = []byte("meta")
	bucketOpen     = []byte("open_holds") // job → nothing: the holds not yet resolved
	keyHead        = []byte("head")
)

// Options tune a ledger; the zero value is the production setting.
type Options struct {
	// AllowanceSeconds of failed runs per buyer per AllowanceWindow are
	// not charged; zero means two GPU-hours.
	AllowanceSeconds int64
	AllowanceWindow  time.Duration // zero means seven days
	// GroupCommit batches concurrent writes into one durable commit (a
	// few milliseconds' wait for each): for a busy coordinator.
	GroupCommit bool
	// NoSync skips fsync on commit: for tests that do not simulate crashes.
	NoSync bool
	Now    func() time.Time
}

// Ledger is an open ledger file.
type Ledger struct {
	db        *bolt.DB
	batch     bool
	now       func() time.Time
	allowance int64
	window    time.Duration
}

// Open opens or creates the ledger at path.
func Open(path string, opt *Options) (*Ledger, error) {
	if opt == nil {
		opt = &Options{}
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second, NoSync: opt.NoSync})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("the ledger %s is in use by a running coordinator", path)
		}
		return nil, fmt.Errorf("opening ledger %s: %w", path, err)
	}
	// Concurrent requests share one durable commit.
	db.MaxBatchDelay = 2 * time.Millisecond
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketAccounts, bucketHolds, bucketJournal, bucketKeys, bucketFailed, bucketMeta, bucketOpen} {
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
	l := &Ledger{db: db, batch: opt.GroupCommit, now: time.Now, allowance: 2 * 3600, window: 7 * 24 * time.Hour}
	if opt.Now != nil {
		l.now = opt.Now
	}
	if opt.AllowanceSeconds != 0 {
		l.allowance = opt.AllowanceSeconds
	}
	if opt.AllowanceWindow != 0 {
		l.window = opt.AllowanceWindow
	}
	return l, nil
}

// Close closes the file.
func (l *Ledger) Close() error { return l.db.Close() }

// update runs fn in a write transaction, batched with concurrent ones
// into one durable commit when group commit is on. fn may run more than
// once and must only change the transaction and what it returns.
func (l *Ledger) update(fn func(tx *bolt.Tx) error) error {
	if l.batch {
		return l.db.Batch(fn)
	}
	return l.db.Update(fn)
}

// once applies a keyed request at most once. digest describes the
// request; a retry with the same key and digest returns the entry the
// first one wrote, the same key with another digest is ErrConflict.
func (l *Ledger) once(tx *bolt.Tx, key, digest string, apply func() (Entry, error)) (Entry, error) {
	keys := tx.Bucket(bucketKeys)
	if v := keys.Get([]byte(key)); v != nil {
		prevDigest, seqStr, _ := strings.Cut(string(v), " ")
		if prevDigest != digest {
			return Entry{}, fmt.Errorf("%w (%s)", ErrConflict, key)
		}
		var seq uint64
		fmt.Sscan(seqStr, &seq)
		return getEntry(tx, seq)
	}
	e, err := apply()
	if err != nil {
		return Entry{}, err
	}
	return e, keys.Put([]byte(key), []byte(fmt.Sprintf("%s %d", digest, e.Seq)))
}

func digestOf(parts ...any) string {
	sum := sha256.Sum256([]byte(fmt.Sprintln(parts...)))
	return hex.EncodeToString(sum[:8])
}

func validAccount(a string) bool {
	for _, p := range []string{"buyer:", "provider:"} {
		if strings.HasPrefix(a, p) && len(a) > len(p) && len(a) < 200 {
			return true
		}
	}
	return false
}

// Credit moves money from outside the market into a buyer's or provider's
// account (a top-up; later, a payment gateway). key makes it idempotent.
func (l *Ledger) Credit(key, account string, amount int64, reason string) (Entry, error) {
	if amount <= 0 {
		return Entry{}, ErrBadAmount
	}
	if !validAccount(account) {
		return Entry{}, fmt.Errorf("%w: %q (credit buyer:PEER or provider:PEER)", ErrBadAccount, account)
	}
	var e Entry
	err := l.update(func(tx *bolt.Tx) error {
		var err error
		e, err = l.once(tx, "credit/"+key, digestOf(account, amount), func() (Entry, error) {
			return l.post(tx, Entry{Kind: KindCredit, Key: "credit/" + key, Reason: reason, Legs: []Leg{{External, -amount}, {account, amount}}})
		})
		return err
	})
	return e, err
}

// Payout moves a provider's earnings out of the market. key makes it
// idempotent.
func (l *Ledger) Payout(key, provider string, amount int64) (Entry, error) {
	if amount <= 0 {
		return Entry{}, ErrBadAmount
	}
	account := Provider(provider)
	var e Entry
	err := l.update(func(tx *bolt.Tx) error {
		var err error
		e, err = l.once(tx, "payout/"+key, digestOf(account, amount), func() (Entry, error) {
			if balance(tx, account) < amount {
				return Entry{}, ErrInsufficientFunds
			}
			return l.post(tx, Entry{Kind: KindPayout, Key: "payout/" + key, Reason: "payout to the provider", Legs: []Leg{{account, -amount}, {External, amount}}})
		})
		return err
	})
	return e, err
}

// PlaceHold moves h.Amount from the buyer to the job's escrow. Placing the
// same hold again returns the first one; a different hold for the same job
// is ErrConflict. Whether failed runs will be charged is decided here,
// from the buyer's allowance, so the buyer can be told before it starts.
func (l *Ledger) PlaceHold(h Hold) (Hold, error) {
	if h.Amount <= 0 {
		return Hold{}, ErrBadAmount
	}
	h.State = Held
	in := h
	err := l.update(func(tx *bolt.Tx) error {
		h = in
		if prev, ok, err := getHold(tx, h.Job); err != nil {
			return err
		} else if ok {
			if prev.Buyer != h.Buyer || prev.Amount != h.Amount || prev.Rate != h.Rate || prev.CapSeconds != h.CapSeconds || prev.Tier != h.Tier {
				return fmt.Errorf("%w (hold/%s)", ErrConflict, h.Job)
			}
			h = prev
			return nil
		}
		if balance(tx, Buyer(h.Buyer)) < h.Amount {
			return ErrInsufficientFunds
		}
		h.ChargeFailures = l.allowanceLeft(tx, h.Buyer) <= 0
		h.PlacedAt = l.now().UnixMilli()
		if _, err := l.post(tx, Entry{Kind: KindHold, Key: "hold/" + h.Job, Job: h.Job, Reason: "held for the budget cap",
			Legs: []Leg{{Buyer(h.Buyer), -h.Amount}, {Escrow(h.Job), h.Amount}}}); err != nil {
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

// MarkStopped records when the buyer heard the run had ended; the meter
// counts no further, whenever the provider's end notice comes. Only the
// first receipt counts.
func (l *Ledger) MarkStopped(job string, at time.Time) (Hold, error) {
	return l.updateHold(job, func(tx *bolt.Tx, h *Hold) error {
		if h.State == Held && h.StartedAt != 0 && h.StoppedAt == 0 {
			h.StoppedAt = at.UnixMilli()
		}
		return nil
	})
}

// charge works out what seconds of a held job cost, capped at the cap and
// the hold.
func charge(h *Hold, seconds, feeBasisPoints int64) (secs, charged, fee int64, err error) {
	secs = min(max(seconds, 0), h.CapSeconds)
	if charged, err = money.Charge(h.Rate, secs); err != nil {
		return
	}
	charged = min(charged, h.Amount)
	fee, err = money.Fee(charged, feeBasisPoints)
	return
}

// Settle charges a held job for seconds of work (capped at its cap): the
// buyer pays the charge, the provider gets it less the fee, the platform
// the fee, and the rest of the hold returns to the buyer, all in one
// entry. Settling a settled job returns it unchanged.
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
		secs, charged, fee, err := charge(h, seconds, feeBasisPoints)
		if err != nil {
			return err
		}
		legs := []Leg{{Escrow(job), -h.Amount}, {Buyer(h.Buyer), h.Amount - charged}, {Provider(h.Provider), charged - fee}, {Platform, fee}}
		if _, err := l.post(tx, Entry{Kind: KindSettle, Key: "end/" + job, Job: job, Reason: reason, Legs: legs}); err != nil {
			return err
		}
		h.State, h.Seconds, h.Charged, h.Fee, h.ProviderPaid, h.Reason = Settled, secs, charged, fee, charged-fee, reason
		h.EndedAt = l.now().UnixMilli()
		return nil
	})
}

// SettleFailure ends a run that the buyer's script or data failed. Within
// the buyer's failed-run allowance the buyer pays nothing and the platform
// pays the provider for its seconds (less the fee it would have kept);
// past it (decided, and told, when the job was held) it is charged like a
// completed run.
func (l *Ledger) SettleFailure(job string, seconds, feeBasisPoints int64, reason string) (Hold, error) {
	return l.updateHold(job, func(tx *bolt.Tx, h *Hold) error {
		if h.State == Settled {
			return nil
		}
		if h.State != Held || h.Provider == "" {
			return ErrConflict
		}
		secs, charged, fee, err := charge(h, seconds, feeBasisPoints)
		if err != nil {
			return err
		}
		// A local: under group commit this function can run again, and
		// must not grow the reason twice.
		why := reason
		if h.ChargeFailures {
			legs := []Leg{{Escrow(job), -h.Amount}, {Buyer(h.Buyer), h.Amount - charged}, {Provider(h.Provider), charged - fee}, {Platform, fee}}
			why += "; charged: the failed-run allowance was used up"
			if _, err := l.post(tx, Entry{Kind: KindSettle, Key: "end/" + job, Job: job, Reason: why, Legs: legs}); err != nil {
				return err
			}
			h.Charged, h.Fee = charged, fee
		} else {
			legs := []Leg{{Escrow(job), -h.Amount}, {Buyer(h.Buyer), h.Amount}, {Platform, -(charged - fee)}, {Provider(h.Provider), charged - fee}}
			why += "; not charged: the platform paid the provider"
			if _, err := l.post(tx, Entry{Kind: KindSettleFailure, Key: "end/" + job, Job: job, Reason: why, Legs: legs}); err != nil {
				return err
			}
			if err := l.useAllowance(tx, h.Buyer, secs); err != nil {
				return err
			}
		}
		h.State, h.Seconds, h.ProviderPaid, h.Reason = Settled, secs, charged-fee, why
		h.EndedAt = l.now().UnixMilli()
		return nil
	})
}

// Release returns a whole hold to the buyer: nobody is charged or paid.
// Releasing a released hold returns it unchanged.
func (l *Ledger) Release(job, reason string) (Hold, error) {
	return l.updateHold(job, func(tx *bolt.Tx, h *Hold) error {
		if h.State == Released {
			return nil
		}
		if h.State != Held {
			return ErrConflict
		}
		legs := []Leg{{Escrow(job), -h.Amount}, {Buyer(h.Buyer), h.Amount}}
		if _, err := l.post(tx, Entry{Kind: KindRelease, Key: "end/" + job, Job: job, Reason: reason, Legs: legs}); err != nil {
			return err
		}
		h.State, h.Reason, h.EndedAt = Released, reason, l.now().UnixMilli()
		return nil
	})
}

type failedRun struct {
	At      int64 `json:"at"`
	Seconds int64 `json:"s"`
}

func (l *Ledger) failedRuns(tx *bolt.Tx, buyer string) []failedRun {
	var runs []failedRun
	if v := tx.Bucket(bucketFailed).Get([]byte(buyer)); v != nil {
		json.Unmarshal(v, &runs)
	}
	cutoff := l.now().Add(-l.window).UnixMilli()
	kept := runs[:0]
	for _, r := range runs {
		if r.At >= cutoff {
			kept = append(kept, r)
		}
	}
	return kept
}

func (l *Ledger) allowanceLeft(tx *bolt.Tx, buyer string) int64 {
	left := l.allowance
	for _, r := range l.failedRuns(tx, buyer) {
		left -= r.Seconds
	}
	return max(left, 0)
}

func (l *Ledger) useAllowance(tx *bolt.Tx, buyer string, seconds int64) error {
	runs := append(l.failedRuns(tx, buyer), failedRun{At: l.now().UnixMilli(), Seconds: seconds})
	data, _ := json.Marshal(runs)
	return tx.Bucket(bucketFailed).Put([]byte(buyer), data)
}

// AllowanceLeft is how many seconds of failed runs a buyer may still have
// free in the current window.
func (l *Ledger) AllowanceLeft(buyer string) int64 {
	var left int64
	l.db.View(func(tx *bolt.Tx) error { left = l.allowanceLeft(tx, buyer); return nil })
	return left
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
	holds, _ := l.OpenHolds()
	for _, h := range holds {
		if h.Buyer == buyer {
			total += h.Amount
		}
	}
	return total
}

// Holds returns every hold, resolved or not.
func (l *Ledger) Holds() ([]Hold, error) {
	var out []Hold
	err := l.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketHolds).ForEach(func(_, v []byte) error {
			var h Hold
			if err := json.Unmarshal(v, &h); err != nil {
				return err
			}
			out = append(out, h)
			return nil
		})
	})
	return out, err
}

// OpenHolds returns the holds not yet resolved.
func (l *Ledger) OpenHolds() ([]Hold, error) {
	var out []Hold
	err := l.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketOpen).ForEach(func(k, _ []byte) error {
			h, ok, err := getHold(tx, string(k))
			if err == nil && ok {
				out = append(out, h)
			}
			return err
		})
	})
	return out, err
}

// Journal returns every entry in order.
func (l *Ledger) Journal() ([]Entry, error) { return l.History("") }

// History returns the entries that touch account (all of them for ""),
// in order.
func (l *Ledger) History(account string) ([]Entry, error) {
	var out []Entry
	err := l.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketJournal).ForEach(func(_, v []byte) error {
			var e Entry
			if err := json.Unmarshal(v, &e); err != nil {
				return err
			}
			for _, leg := range e.Legs {
				if account == "" || leg.Account == account {
					out = append(out, e)
					break
				}
			}
			return nil
		})
	})
	return out, err
}

// Head is the last entry's sequence number and hash: what the coordinator
// signs. Anyone holding a signed head can tell a rewritten journal.
func (l *Ledger) Head() (uint64, string) {
	var seq uint64
	var hash string
	l.db.View(func(tx *bolt.Tx) error { seq, hash = head(tx); return nil })
	return seq, hash
}

func head(tx *bolt.Tx) (uint64, string) {
	v := tx.Bucket(bucketMeta).Get(keyHead)
	if len(v) < 8 {
		return 0, ""
	}
	return binary.BigEndian.Uint64(v[:8]), string(v[8:])
}

func (l *Ledger) updateHold(job string, change func(*bolt.Tx, *Hold) error) (Hold, error) {
	var h Hold
	err := l.update(func(tx *bolt.Tx) error {
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

// post appends a balanced entry to the chain and applies it, inside tx.
func (l *Ledger) post(tx *bolt.Tx, e Entry) (Entry, error) {
	var sum int64
	for _, leg := range e.Legs {
		sum += leg.Amount
	}
	if sum != 0 {
		return e, fmt.Errorf("ledger entry %s for %q does not balance (off by %d)", e.Kind, e.Job, sum)
	}
	accounts := tx.Bucket(bucketAccounts)
	for _, leg := range e.Legs {
		if leg.Amount == 0 {
			continue
		}
		var v [8]byte
		binary.BigEndian.PutUint64(v[:], uint64(balance(tx, leg.Account)+leg.Amount))
		if err := accounts.Put([]byte(leg.Account), v[:]); err != nil {
			return e, err
		}
	}
	journal := tx.Bucket(bucketJournal)
	seq, err := journal.NextSequence()
	if err != nil {
		return e, err
	}
	_, prev := head(tx)
	e.Seq, e.At, e.PrevHash = seq, l.now().UnixMilli(), prev
	e.Hash = e.computeHash()
	data, err := json.Marshal(e)
	if err != nil {
		return e, err
	}
	if err := journal.Put(seqKey(seq), data); err != nil {
		return e, err
	}
	return e, tx.Bucket(bucketMeta).Put(keyHead, append(seqKey(seq), e.Hash...))
}

func seqKey(seq uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], seq)
	return k[:]
}

func getEntry(tx *bolt.Tx, seq uint64) (Entry, error) {
	var e Entry
	v := tx.Bucket(bucketJournal).Get(seqKey(seq))
	if v == nil {
		return e, fmt.Errorf("journal entry %d is missing", seq)
	}
	return e, json.Unmarshal(v, &e)
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

// putHold stores a hold and keeps the index of open holds, so that the
// coordinator's sweeper and balance lookups read only those, not every
// hold there ever was.
func putHold(tx *bolt.Tx, h Hold) error {
	data, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if err := tx.Bucket(bucketHolds).Put([]byte(h.Job), data); err != nil {
		return err
	}
	if h.State == Held {
		return tx.Bucket(bucketOpen).Put([]byte(h.Job), []byte{1})
	}
	return tx.Bucket(bucketOpen).Delete([]byte(h.Job))
}
