// Package store is a node's own state in bbolt: its jobs, each job's event
// log (state changes and the script's output), and the inputs it has
// accepted. Writes are transactional: a failed call leaves nothing behind.
package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ErrNotFound is returned for a job or upload the store does not hold.
var ErrNotFound = errors.New("not found")

// Job states.
const (
	Queued    = "queued"
	Running   = "running"
	Completed = "completed"
	Failed    = "failed"
	Cancelled = "cancelled"
)

// Terminal reports whether a job in state s will not change again.
func Terminal(s string) bool { return s == Completed || s == Failed || s == Cancelled }

// Input is a file the buyer gave, stored as blocks.
type Input struct {
	CID     string   `json:"cid"`
	Name    string   `json:"name"`
	Size    int64    `json:"size"`
	Rows    int64    `json:"rows,omitempty"`
	Columns int      `json:"columns,omitempty"`
	Header  []string `json:"header,omitempty"`
}

// Upload is an input this node has checked and stored for an account.
type Upload struct {
	Input
	Account string    `json:"account,omitempty"`
	Kind    string    `json:"kind"` // "dataset" or "script"
	At      time.Time `json:"at"`
}

// Transition is one state change.
type Transition struct {
	State string    `json:"state"`
	At    time.Time `json:"at"`
}

// Model is a job's output.
type Model struct {
	CID  string `json:"cid"`
	Name string `json:"name"`
	Size int64  `json:"size"`
	Dir  bool   `json:"dir"`
}

// Telemetry is the latest GPU reading of a running job.
type Telemetry struct {
	At           time.Time `json:"at"`
	ElapsedMs    int64     `json:"elapsed_ms"`
	GPU          string    `json:"gpu"`
	TempC        int       `json:"temp_c"`
	VRAMUsedMiB  uint64    `json:"vram_used_mib"`
	VRAMTotalMiB uint64    `json:"vram_total_mib"`
	FanPercent   int       `json:"fan_pct"`
	UtilPercent  int       `json:"util_pct"`
	Simulated    bool      `json:"simulated"`
}

// MatchTiming is how long the last match took, step by step.
type MatchTiming struct {
	LookupMs  int64 `json:"lookup_ms"`  // DHT lookup and connecting to the providers found
	OfferMs   int64 `json:"offer_ms"`   // publishing the request until the first offer
	ConfirmMs int64 `json:"confirm_ms"` // the contract until the provider's confirm
	Providers int   `json:"providers"`  // providers the lookup found
}

// Job is one job as its buyer's node knows it.
type Job struct {
	ID         string       `json:"id"`
	Account    string       `json:"account,omitempty"` // whose job, on a node with many users; "" is the owner
	Run        string       `json:"run"`               // the current attempt: its hold and contract carry this ID
	Tier       string       `json:"tier"`
	State      string       `json:"state"`
	Rate       int64        `json:"rate"` // paise per hour
	CapSeconds int64        `json:"cap_s"`
	MaxCharge  int64        `json:"max_charge"`
	Dataset    Input        `json:"dataset"`
	Script     Input        `json:"script"`
	Packages   []string     `json:"packages,omitempty"`
	CreatedAt  time.Time    `json:"created_at"`
	History    []Transition `json:"history"`
	Waiting    string       `json:"waiting,omitempty"`
	Provider   string       `json:"provider,omitempty"`
	GPU        string       `json:"gpu,omitempty"`
	Simulated  bool         `json:"simulated,omitempty"`
	Attempts   int          `json:"attempts"`
	Match      *MatchTiming `json:"match,omitempty"`

	ExitCode    int    `json:"exit_code,omitempty"`
	Explanation string `json:"explanation,omitempty"`
	Traceback   string `json:"traceback,omitempty"`
	Model       *Model `json:"model,omitempty"`

	FailedRunsCharged bool `json:"failed_runs_charged,omitempty"`

	Settled      bool   `json:"settled"`
	Charged      int64  `json:"charged"`
	Seconds      int64  `json:"seconds"`
	SettleReason string `json:"settle_reason,omitempty"`

	Telemetry *Telemetry `json:"telemetry,omitempty"`
}

// SetState moves the job to state s at time at, recording the change.
func (j *Job) SetState(s string, at time.Time) {
	if j.State == s {
		return
	}
	j.State = s
	j.History = append(j.History, Transition{State: s, At: at})
}

// StateAt is when the job entered state s, or the zero time.
func (j *Job) StateAt(s string) time.Time {
	for _, t := range j.History {
		if t.State == s {
			return t.At
		}
	}
	return time.Time{}
}

// Event kinds.
const (
	EventState = "state"
	EventLog   = "log"
)

// Event is one entry of a job's log: a state change or an output line.
type Event struct {
	Seq    uint64    `json:"seq"`
	At     time.Time `json:"at"`
	Kind   string    `json:"kind"`
	State  string    `json:"state,omitempty"`
	Stream string    `json:"stream,omitempty"`
	Line   string    `json:"line,omitempty"`
}

var (
	bucketJobs    = []byte("jobs")
	bucketOrder   = []byte("jobs_by_time")
	bucketEvents  = []byte("events")
	bucketUploads = []byte("uploads")
	bucketTokens  = []byte("tokens")
	bucketAccts   = []byte("accounts")
)

// Store is an open node database.
type Store struct{ db *bolt.DB }

// Open opens or creates the database at path.
func Open(path string) (*Store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("%s is in use by another gaas process: stop it, or use another --data folder", path)
		}
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketJobs, bucketOrder, bucketEvents, bucketUploads, bucketTokens, bucketAccts} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Store{db: db}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// CreateJob stores a new job with its first event, in one transaction.
func (s *Store) CreateJob(j Job) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketJobs).Get([]byte(j.ID)) != nil {
			return fmt.Errorf("job %s already exists", j.ID)
		}
		if err := putJSON(tx.Bucket(bucketJobs), []byte(j.ID), j); err != nil {
			return err
		}
		if err := tx.Bucket(bucketOrder).Put(orderKey(j), []byte(j.ID)); err != nil {
			return err
		}
		_, err := appendEvent(tx, j.ID, Event{At: j.CreatedAt, Kind: EventState, State: j.State})
		return err
	})
}

// UpdateJob changes a stored job inside a transaction. When the change
// moves the job to a new state, the state event is appended in the same
// transaction and returned.
func (s *Store) UpdateJob(id string, change func(*Job) error) (Job, *Event, error) {
	var j Job
	var ev *Event
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketJobs)
		v := b.Get([]byte(id))
		if v == nil {
			return ErrNotFound
		}
		if err := json.Unmarshal(v, &j); err != nil {
			return err
		}
		before := j.State
		if err := change(&j); err != nil {
			return err
		}
		if j.State != before {
			e, err := appendEvent(tx, id, Event{At: j.History[len(j.History)-1].At, Kind: EventState, State: j.State})
			if err != nil {
				return err
			}
			ev = &e
		}
		return putJSON(b, []byte(id), j)
	})
	return j, ev, err
}

// JobStates counts the jobs of every account by state.
func (s *Store) JobStates() (map[string]int, error) {
	counts := map[string]int{Queued: 0, Running: 0, Completed: 0, Failed: 0, Cancelled: 0}
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketJobs).ForEach(func(_, v []byte) error {
			var j struct {
				State string `json:"state"`
			}
			if err := json.Unmarshal(v, &j); err != nil {
				return err
			}
			counts[j.State]++
			return nil
		})
	})
	return counts, err
}

// Job returns a job.
func (s *Store) Job(id string) (Job, error) {
	var j Job
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketJobs).Get([]byte(id))
		if v == nil {
			return ErrNotFound
		}
		return json.Unmarshal(v, &j)
	})
	return j, err
}

// Jobs returns up to limit of an account's jobs, newest first, skipping
// offset; all accounts' when account is "*".
func (s *Store) Jobs(account string, offset, limit int) ([]Job, int, error) {
	var out []Job
	total := 0
	err := s.db.View(func(tx *bolt.Tx) error {
		jobs := tx.Bucket(bucketJobs)
		c := tx.Bucket(bucketOrder).Cursor()
		for k, id := c.Last(); k != nil; k, id = c.Prev() {
			var j Job
			if err := json.Unmarshal(jobs.Get(id), &j); err != nil {
				return err
			}
			if account != "*" && j.Account != account {
				continue
			}
			total++
			if total <= offset || len(out) >= limit {
				continue
			}
			out = append(out, j)
		}
		return nil
	})
	return out, total, err
}

// AppendLog appends an output line to a job's event log.
func (s *Store) AppendLog(id string, e Event) (Event, error) {
	evs, err := s.AppendLogs(id, []Event{e})
	if err != nil {
		return e, err
	}
	return evs[0], nil
}

// AppendLogs appends output lines in one transaction and returns them
// with their sequence numbers.
func (s *Store) AppendLogs(id string, lines []Event) ([]Event, error) {
	out := make([]Event, 0, len(lines))
	err := s.db.Update(func(tx *bolt.Tx) error {
		out = out[:0]
		for _, e := range lines {
			e.Kind = EventLog
			e, err := appendEvent(tx, id, e)
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

// Events returns a job's events with Seq greater than after.
func (s *Store) Events(id string, after uint64) ([]Event, error) {
	var out []Event
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents).Bucket([]byte(id))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.Seek(seqKey(after + 1)); k != nil; k, v = c.Next() {
			var e Event
			if err := json.Unmarshal(v, &e); err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

// PutUpload records a checked input.
func (s *Store) PutUpload(u Upload) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return putJSON(tx.Bucket(bucketUploads), []byte(u.Account+"/"+u.Kind+"/"+u.CID), u)
	})
}

// Upload returns an input of a kind that an account uploaded.
func (s *Store) Upload(account, kind, cid string) (Upload, error) {
	var u Upload
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketUploads).Get([]byte(account + "/" + kind + "/" + cid))
		if v == nil {
			return ErrNotFound
		}
		return json.Unmarshal(v, &u)
	})
	return u, err
}

func appendEvent(tx *bolt.Tx, id string, e Event) (Event, error) {
	b, err := tx.Bucket(bucketEvents).CreateBucketIfNotExists([]byte(id))
	if err != nil {
		return e, err
	}
	if e.Seq, err = b.NextSequence(); err != nil {
		return e, err
	}
	if e.At.IsZero() {
		e.At = time.Now()
	}
	return e, putJSON(b, seqKey(e.Seq), e)
}

func putJSON(b *bolt.Bucket, key []byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(key, data)
}

func seqKey(seq uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], seq)
	return k[:]
}

// orderKey sorts jobs by creation time, then ID.
func orderKey(j Job) []byte {
	k := binary.BigEndian.AppendUint64(nil, uint64(j.CreatedAt.UnixNano()))
	return append(k, j.ID...)
}

// Token is an API token: only a hash of its secret is kept.
type Token struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Account   string    `json:"account,omitempty"`
	Hash      string    `json:"hash"` // hex SHA-256 of the secret
	CreatedAt time.Time `json:"created_at"`
}

// PutToken stores a token.
func (s *Store) PutToken(t Token) error {
	return s.db.Update(func(tx *bolt.Tx) error { return putJSON(tx.Bucket(bucketTokens), []byte(t.ID), t) })
}

// Tokens lists the stored tokens.
func (s *Store) Tokens() ([]Token, error) {
	var out []Token
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketTokens).ForEach(func(_, v []byte) error {
			var t Token
			if err := json.Unmarshal(v, &t); err != nil {
				return err
			}
			out = append(out, t)
			return nil
		})
	})
	return out, err
}

// DeleteToken removes a token; ErrNotFound if there is none.
func (s *Store) DeleteToken(id string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketTokens)
		if b.Get([]byte(id)) == nil {
			return ErrNotFound
		}
		return b.Delete([]byte(id))
	})
}

// Account is a user of a node that serves many.
type Account struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// CreateAccount stores a new account; an existing name is an error.
func (s *Store) CreateAccount(a Account) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAccts)
		if b.Get([]byte(a.Name)) != nil {
			return fmt.Errorf("account %q already exists", a.Name)
		}
		return putJSON(b, []byte(a.Name), a)
	})
}

// Accounts lists the accounts.
func (s *Store) Accounts() ([]Account, error) {
	var out []Account
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAccts).ForEach(func(_, v []byte) error {
			var a Account
			if err := json.Unmarshal(v, &a); err != nil {
				return err
			}
			out = append(out, a)
			return nil
		})
	})
	return out, err
}
