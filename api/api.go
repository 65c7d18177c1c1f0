// Package api is the node's HTTP API: the JSON types the app and the CLI
// see, the Service interface a node implements, the HTTP handler that
// serves it, and a Go client that speaks it. The CLI and the HTTP server
// share Service, so both are exercised by the same tests.
package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/trisparc/gaas/inputs"
)

// Service is everything the app and the CLI can ask of a node.
type Service interface {
	// Live says whether the node is up, without asking the network: an
	// error once it is shutting down.
	Live(ctx context.Context) error
	Health(ctx context.Context) (Health, error)
	Tiers(ctx context.Context) (Tiers, error)
	UploadDataset(ctx context.Context, name string, r io.Reader) (Dataset, error)
	UploadScript(ctx context.Context, name string, r io.Reader) (Script, error)
	// CheckPackages checks package chips as they are typed, each on its
	// own: a name with an optional version, no URL, path or pip option,
	// no package twice.
	CheckPackages(ctx context.Context, chips []string) (PackageCheck, error)
	CreateJob(ctx context.Context, spec JobSpec) (Job, error)
	Jobs(ctx context.Context, offset, limit int) (JobList, error)
	Job(ctx context.Context, id string) (Job, error)
	CancelJob(ctx context.Context, id string) (Job, error)
	// RetryJob starts a new job with a finished job's inputs; any field
	// set in change replaces that input (edit and retry).
	RetryJob(ctx context.Context, id string, change JobSpec) (Job, error)
	// Estimate prices a job before it starts: the rate, the most it can
	// cost, and whether a failed run would be charged.
	Estimate(ctx context.Context, tier string, capSeconds int64) (Estimate, error)
	// Events streams a job's events after seq `after`: first those
	// already logged, then live ones. The channel closes after the job
	// reaches a final state, or when ctx ends.
	Events(ctx context.Context, id string, after uint64) (<-chan Event, error)
	// Logs returns the job's logged events (state changes, notices and
	// output lines) so far.
	Logs(ctx context.Context, id string) ([]Event, error)
	// Model opens a completed job's model: a file as itself, a folder as
	// a .tar.gz, or as a .zip when format is "zip".
	Model(ctx context.Context, id, format string) (*ModelFile, error)
	Balance(ctx context.Context) (Balance, error)
	// Accounts lists the node's accounts (the owner's call).
	Accounts(ctx context.Context) ([]Account, error)
	// CreateAccount makes an account with its first token (the owner's
	// call); the account sees only its own jobs, files and balance.
	CreateAccount(ctx context.Context, name string) (NewToken, error)
	// Tokens lists the API tokens (never their secrets).
	Tokens(ctx context.Context) ([]Token, error)
	// CreateToken makes a named token; its secret is shown only now.
	CreateToken(ctx context.Context, name string) (NewToken, error)
	// RevokeToken deletes a token: it stops working at once.
	RevokeToken(ctx context.Context, id string) error
	// History is this node's ledger entries (as buyer and as provider).
	History(ctx context.Context) ([]LedgerEntry, error)
	// Payout moves provider earnings out; key makes a retry harmless.
	Payout(ctx context.Context, amount int64, key string) (LedgerEntry, error)
	// WriteMetrics writes the node's metrics in Prometheus' text format
	// (the owner's call).
	WriteMetrics(ctx context.Context, w io.Writer) error
}

// Error is an API error: an HTTP status, a stable code for programs and a
// sentence for people.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"error"`
	// Details carries the checked input where a check failed (a dataset's
	// line, a script's syntax error).
	Details any `json:"details,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// Errorf makes an API error.
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Error codes.
const (
	CodeBadRequest        = "bad_request"
	CodeUnauthorized      = "unauthorized"
	CodeForbidden         = "forbidden"
	CodeNotFound          = "not_found"
	CodeInvalidInput      = "invalid_input"
	CodeUnknownTier       = "unknown_tier"
	CodeInsufficientFunds = "insufficient_funds"
	CodeConflict          = "conflict"
	CodeUnavailable       = "unavailable"
	CodeTooLarge          = "too_large"
	CodeInternal          = "internal"
)

// Sentence is an error as a person should read it: an API error's own
// sentence, or the error's text.
func Sentence(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return err.Error()
}

// NotFound is the error for an unknown job.
func NotFound(id string) *Error {
	return Errorf(http.StatusNotFound, CodeNotFound, "There is no job %q on this node.", id)
}

// Health is the node's liveness and what it is connected to.
type Health struct {
	OK                   bool   `json:"ok"`
	Peer                 string `json:"peer"`
	CoordinatorReachable bool   `json:"coordinator_reachable"`
	Provider             bool   `json:"provider"`
	// Sandbox says how a provider's job limits are enforced on its machine.
	Sandbox string `json:"sandbox,omitempty"`
	Version int    `json:"protocol_version"`
}

// Tier is one line of the rate card, ready to show.
type Tier struct {
	Name        string `json:"name"`
	Title       string `json:"title"`
	Class       string `json:"class"`
	MinVRAMMiB  uint64 `json:"min_vram_mib"`
	Rate        int64  `json:"rate_paise_per_hour"`
	RateDisplay string `json:"rate_display"` // "₹50/hr"
}

// Tiers is the rate card.
type Tiers struct {
	Tiers          []Tier `json:"tiers"`
	FeeBasisPoints int64  `json:"fee_bps"`
}

// Find returns a tier by name.
func (t Tiers) Find(name string) (Tier, bool) {
	for _, x := range t.Tiers {
		if x.Name == name {
			return x, true
		}
	}
	return Tier{}, false
}

// Authenticator checks a bearer token and says whose it is: "" for the
// node's owner, or the name of one of its accounts.
type Authenticator interface {
	Authenticate(token string) (account string, ok bool)
}

type accountKey struct{}

// WithAccount marks a request as made for an account.
func WithAccount(ctx context.Context, account string) context.Context {
	return context.WithValue(ctx, accountKey{}, account)
}

// AccountFrom is the account a request is made for: "" is the owner.
func AccountFrom(ctx context.Context) string {
	a, _ := ctx.Value(accountKey{}).(string)
	return a
}

// Account is one user of a node that serves many (a hosted node).
type Account struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// AccountRequest names a new account.
type AccountRequest struct {
	Name string `json:"name"`
}

// Token is an API token as listed: never its secret.
type Token struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Account   string    `json:"account,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	LastUsed  time.Time `json:"last_used,omitempty"`
}

// NewToken is a token just made, with its secret.
type NewToken struct {
	Token
	Secret string `json:"token"`
}

// TokenRequest names a new token.
type TokenRequest struct {
	Name string `json:"name"`
}

// Estimate is the price screen: what a job of a tier and cap costs.
type Estimate struct {
	Tier                   string `json:"tier"`
	Rate                   int64  `json:"rate_paise_per_hour"`
	RateDisplay            string `json:"rate_display"`
	CapSeconds             int64  `json:"cap_seconds"`
	MaxCharge              int64  `json:"max_charge_paise"`
	MaxChargeDisplay       string `json:"max_charge_display"`
	StartButton            string `json:"start_button"` // "Start training ₹50/hr"
	Available              int64  `json:"available_paise"`
	EnoughFunds            bool   `json:"enough_funds"`
	FailedRunsCharged      bool   `json:"failed_runs_charged"`
	FailedAllowanceSeconds int64  `json:"failed_allowance_seconds"`
	FailedRunNote          string `json:"failed_run_note"`
}

// Dataset is an uploaded, checked CSV.
type Dataset struct {
	CID       string   `json:"cid"`
	Name      string   `json:"name"`
	Size      int64    `json:"size"`
	Rows      int64    `json:"rows"`
	Columns   int      `json:"columns"`
	Header    []string `json:"header"`
	Delimiter string   `json:"delimiter"`
}

// Script is an uploaded, checked Python script.
type Script struct {
	CID       string `json:"cid"`
	Name      string `json:"name"`
	Size      int64  `json:"size"`
	MainFound bool   `json:"main_found"`
	MainAsync bool   `json:"main_async,omitempty"`
	MainLine  int    `json:"main_line,omitempty"`
}

// PackagesRequest is a list of package chips to check.
type PackagesRequest struct {
	Packages []string `json:"packages"`
}

// PackageCheck is each chip checked: OK when every one is.
type PackageCheck struct {
	OK    bool          `json:"ok"`
	Chips []inputs.Chip `json:"chips"`
}

// JobSpec is what a new job needs.
type JobSpec struct {
	Tier       string   `json:"tier"`
	Dataset    string   `json:"dataset"` // CID from UploadDataset
	Script     string   `json:"script"`  // CID from UploadScript
	Packages   []string `json:"packages,omitempty"`
	CapSeconds int64    `json:"cap_seconds"` // budget cap; 0 means one hour
}

// Input is a job's dataset or script as the job records it.
type Input struct {
	CID     string   `json:"cid"`
	Name    string   `json:"name"`
	Size    int64    `json:"size"`
	Rows    int64    `json:"rows,omitempty"`
	Columns int      `json:"columns,omitempty"`
	Header  []string `json:"header,omitempty"`
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

// Telemetry is a GPU reading during a run.
type Telemetry struct {
	At           time.Time `json:"at"`
	ElapsedMs    int64     `json:"elapsed_ms"`
	GPU          string    `json:"gpu"`
	TempC        int       `json:"temp_c"`
	VRAMUsedMiB  uint64    `json:"vram_used_mib"`
	VRAMTotalMiB uint64    `json:"vram_total_mib"`
	FanPercent   int       `json:"fan_pct"` // -1: no fan
	UtilPercent  int       `json:"util_pct"`
	Simulated    bool      `json:"simulated"`
}

// Job is a job as the app shows it.
type Job struct {
	ID          string       `json:"id"`
	Tier        string       `json:"tier"`
	State       string       `json:"state"`
	Rate        int64        `json:"rate_paise_per_hour"`
	RateDisplay string       `json:"rate_display"`
	CapSeconds  int64        `json:"cap_seconds"`
	MaxCharge   int64        `json:"max_charge_paise"`
	Dataset     Input        `json:"dataset"`
	Script      Input        `json:"script"`
	Packages    []string     `json:"packages,omitempty"`
	CreatedAt   time.Time    `json:"created_at"`
	History     []Transition `json:"history"`
	Waiting     string       `json:"waiting,omitempty"`
	Provider    string       `json:"provider,omitempty"`
	GPU         string       `json:"gpu,omitempty"`
	Simulated   bool         `json:"simulated,omitempty"`
	Attempts    int          `json:"attempts"` // providers tried; more than one after a provider was lost
	Match       *MatchTiming `json:"match,omitempty"`
	ElapsedMs   int64        `json:"elapsed_ms"`
	ExitCode    int          `json:"exit_code,omitempty"`
	Explanation string       `json:"explanation,omitempty"`
	Traceback   string       `json:"traceback,omitempty"`
	Model       *Model       `json:"model,omitempty"`
	Settled     bool         `json:"settled"`
	Charged     int64        `json:"charged_paise"`
	ChargeNote  string       `json:"charge_note,omitempty"` // "Not charged", "Charged ₹0.06 for 5 s"
	Seconds     int64        `json:"billed_seconds"`
	// FailedRunsCharged: the buyer's failed-run allowance was used up when
	// the job started, so a failure of the script is charged.
	FailedRunsCharged bool       `json:"failed_runs_charged,omitempty"`
	SettleReason      string     `json:"settle_reason,omitempty"`
	Telemetry         *Telemetry `json:"telemetry,omitempty"`
}

// MatchTiming is how long matching the job with its provider took.
type MatchTiming struct {
	LookupMs  int64 `json:"lookup_ms"`  // DHT lookup and connecting to the providers found
	OfferMs   int64 `json:"offer_ms"`   // publishing the request on gossipsub until the first offer
	ConfirmMs int64 `json:"confirm_ms"` // sending the contract until the provider confirmed
	Providers int   `json:"providers"`  // providers of the tier the lookup found
}

// JobList is a page of jobs, newest first.
type JobList struct {
	Jobs  []Job `json:"jobs"`
	Total int   `json:"total"`
}

// Event kinds.
const (
	EventState     = "state"
	EventLog       = "log"
	EventNotice    = "notice" // a message from GaaS itself, such as "Waiting for a Pro GPU"
	EventTelemetry = "telemetry"
)

// Event is one item of a job's live stream. State, log and notice events
// have a Seq and can be resumed after; telemetry has none.
type Event struct {
	Seq       uint64     `json:"seq,omitempty"`
	At        time.Time  `json:"at"`
	Kind      string     `json:"kind"`
	State     string     `json:"state,omitempty"`
	Stream    string     `json:"stream,omitempty"`
	Line      string     `json:"line,omitempty"`
	Telemetry *Telemetry `json:"telemetry,omitempty"`
}

// ModelFile is an open model download.
type ModelFile struct {
	Name        string
	CID         string
	Size        int64 // -1 when not known in advance (an archive)
	ContentType string
	Body        io.ReadCloser
}

// Balance is the node's account at the coordinator.
type Balance struct {
	Account          string `json:"account"`
	Available        int64  `json:"available_paise"`
	Held             int64  `json:"held_paise"`
	Earned           int64  `json:"earned_paise"`
	AvailableDisplay string `json:"available_display"`
	HeldDisplay      string `json:"held_display"`
	EarnedDisplay    string `json:"earned_display"`
	// FailedAllowanceSeconds of failed runs are still free this week; at
	// zero, a run the script fails is charged (the price screen says so).
	FailedAllowanceSeconds int64 `json:"failed_allowance_seconds"`
}

// LedgerLeg is one account's side of a ledger entry.
type LedgerLeg struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount_paise"`
}

// LedgerEntry is one entry of the coordinator's journal.
type LedgerEntry struct {
	Seq    uint64      `json:"seq"`
	At     time.Time   `json:"at"`
	Kind   string      `json:"kind"`
	Job    string      `json:"job,omitempty"`
	Reason string      `json:"reason"`
	Legs   []LedgerLeg `json:"legs"`
	Hash   string      `json:"hash"`
}

// PayoutRequest asks to pay provider earnings out.
type PayoutRequest struct {
	Amount int64  `json:"amount_paise"`
	Key    string `json:"key"`
}
