package protocol

// Every message below travels inside a signed Envelope. Times are Unix
// milliseconds; money is integer paise; peers are peer ID strings; content
// is CID strings.

// Message is implemented by every wire message.
type Message interface {
	// Kind names the message in its envelope.
	Kind() string
}

// JobRequest is published by a buyer on the tier's topic.
type JobRequest struct {
	JobID      string   `json:"job"`
	Tier       string   `json:"tier"`
	CapSeconds int64    `json:"cap_s"`
	Buyer      string   `json:"buyer"`
	BuyerAddrs []string `json:"buyer_addrs"`
	IssuedAt   int64    `json:"at"`
}

// Offer is a provider's answer to a JobRequest, sent to the buyer directly.
type Offer struct {
	JobID     string `json:"job"`
	Tier      string `json:"tier"`
	Provider  string `json:"provider"`
	GPU       string `json:"gpu"`
	Simulated bool   `json:"simulated"`
}

// Contract is what buyer and provider agree on. The buyer signs it in an
// Accept; the provider countersigns it in a Confirm; the coordinator checks
// both signatures before it meters a run.
type Contract struct {
	JobID            string   `json:"job"`
	Tier             string   `json:"tier"`
	RatePaisePerHour int64    `json:"rate"`
	CapSeconds       int64    `json:"cap_s"`
	Buyer            string   `json:"buyer"`
	Provider         string   `json:"provider"`
	Dataset          string   `json:"dataset"`
	DatasetName      string   `json:"dataset_name"`
	Script           string   `json:"script"`
	ScriptName       string   `json:"script_name"`
	Packages         []string `json:"packages,omitempty"`
}

// Accept opens a job stream: the buyer's signed contract.
type Accept struct {
	Contract Contract `json:"contract"`
}

// Confirm is the provider's countersignature: it has taken the job.
type Confirm struct {
	Contract Contract `json:"contract"`
}

// Commit is the buyer's last word, sent after the provider's Confirm:
// run it. Only with it can the provider have the coordinator start the
// meter, so a provider that declined (or was never confirmed) cannot.
type Commit struct {
	JobID    string `json:"job"`
	Provider string `json:"provider"`
}

// Decline is the provider's refusal of an Accept (it is busy, or the
// contract does not match its offer).
type Decline struct {
	JobID  string `json:"job"`
	Reason string `json:"reason"`
}

// Started tells the buyer the coordinator has begun metering and the script
// is about to run.
type Started struct {
	JobID string `json:"job"`
	At    int64  `json:"at"`
}

// Log is one line of the script's output.
type Log struct {
	JobID  string `json:"job"`
	Stream string `json:"stream"` // "stdout" or "stderr"
	Line   string `json:"line"`
	At     int64  `json:"at"`
}

// Telemetry is the provider's GPU reading, sent once a second while a job runs.
type Telemetry struct {
	JobID        string `json:"job"`
	ElapsedMs    int64  `json:"elapsed_ms"`
	GPU          string `json:"gpu"`
	TempC        int    `json:"temp_c"`
	VRAMUsedMiB  uint64 `json:"vram_used_mib"`
	VRAMTotalMiB uint64 `json:"vram_total_mib"`
	FanPercent   int    `json:"fan_pct"` // -1: the card has no fan
	UtilPercent  int    `json:"util_pct"`
	Simulated    bool   `json:"simulated"`
}

// Outcomes of a run.
const (
	OutcomeCompleted = "completed"
	OutcomeFailed    = "failed"    // the script or its data failed
	OutcomeCancelled = "cancelled" // the buyer cancelled
	OutcomeAborted   = "aborted"   // the provider could not run it
)

// Causes of a failed or aborted run.
const (
	CauseScript   = "script"    // main() raised or exited non-zero
	CauseNoMain   = "no_main"   // nothing to call
	CauseNoModel  = "no_model"  // main() returned but wrote nothing to $GAAS_OUTPUT
	CauseBadModel = "bad_model" // the output holds something that cannot be exported
	CauseCap      = "cap"       // the budget cap was reached
	CauseMemory   = "memory"    // the job used more memory than its limit
	CauseDisk     = "disk"      // the job wrote more than its disk quota
	CauseInputs   = "inputs"    // the provider could not fetch the inputs
	CausePackages = "packages"  // pip could not install the packages (not metered)
	CauseSandbox  = "sandbox"   // the provider's sandbox failed
	CauseRefused  = "refused"   // the coordinator refused to start metering
)

// Finished ends a job stream.
type Finished struct {
	JobID     string `json:"job"`
	Outcome   string `json:"outcome"`
	ExitCode  int    `json:"exit_code"`
	Cause     string `json:"cause,omitempty"`  // one of the Cause values, when it failed
	Reason    string `json:"reason,omitempty"` // why it failed, in one line
	Model     string `json:"model,omitempty"`  // CID of the output
	ModelName string `json:"model_name,omitempty"`
	ModelSize int64  `json:"model_size,omitempty"`
}

// Cancel is sent by the buyer on the job stream: stop now, deliver nothing.
type Cancel struct {
	JobID string `json:"job"`
}

// Tier is one line of the rate card.
type Tier struct {
	Name             string `json:"name"`
	Title            string `json:"title"`
	MinVRAMMiB       uint64 `json:"min_vram_mib"`
	Class            string `json:"class"`
	RatePaisePerHour int64  `json:"rate"`
}

// RateCard is the coordinator's price list.
type RateCard struct {
	Tiers          []Tier `json:"tiers"`
	FeeBasisPoints int64  `json:"fee_bps"`
	IssuedAt       int64  `json:"at"`
}

// Tier returns the rate card's line for a tier name.
func (rc RateCard) Tier(name string) (Tier, bool) {
	for _, t := range rc.Tiers {
		if t.Name == name {
			return t, true
		}
	}
	return Tier{}, false
}

// TierFor returns the highest tier a GPU with vramMiB of memory can serve.
func (rc RateCard) TierFor(vramMiB uint64) (Tier, bool) {
	var best Tier
	found := false
	for _, t := range rc.Tiers {
		if vramMiB >= t.MinVRAMMiB && (!found || t.MinVRAMMiB > best.MinVRAMMiB) {
			best, found = t, true
		}
	}
	return best, found
}

// RateCardRequest asks the coordinator for its rate card.
type RateCardRequest struct{}

// HoldRequest asks the coordinator to hold rate × cap of the signer's
// balance for a job. The coordinator prices it from its own rate card.
type HoldRequest struct {
	JobID      string `json:"job"`
	Tier       string `json:"tier"`
	CapSeconds int64  `json:"cap_s"`
	// Account names one of the signer's sub-accounts (a user of a hosted
	// node); empty is the signer's own.
	Account string `json:"account,omitempty"`
}

// StartNotice tells the coordinator a run begins now. It carries the
// buyer's signed Accept and Commit so the coordinator can check that the
// buyer agreed to this contract with this provider.
type StartNotice struct {
	JobID  string   `json:"job"`
	Accept Envelope `json:"accept"`
	Commit Envelope `json:"commit"`
}

// Heartbeat is the provider's signed "still running" to the coordinator,
// every few seconds; when they stop, the provider is taken as lost.
type Heartbeat struct {
	JobID string `json:"job"`
}

// EndNotice is the provider's signed statement that a run ended.
type EndNotice struct {
	JobID   string `json:"job"`
	Outcome string `json:"outcome"`
	Cause   string `json:"cause,omitempty"`
	Model   string `json:"model,omitempty"`
}

// CancelNotice is the buyer's signed cancel of a job.
type CancelNotice struct {
	JobID string `json:"job"`
}

// ReceiptNotice is the buyer's signed word that its provider has told it
// the run ended: the meter stops there, whenever the provider's own end
// notice comes.
type ReceiptNotice struct {
	JobID string `json:"job"`
}

// AbortNotice is the buyer's report that its provider vanished before the
// run ended; the coordinator voids the hold if no end notice came.
type AbortNotice struct {
	JobID  string `json:"job"`
	Reason string `json:"reason"`
}

// SettlementRequest asks how a job's hold was resolved.
type SettlementRequest struct {
	JobID string `json:"job"`
}

// Hold states as the coordinator reports them.
const (
	HoldHeld     = "held"
	HoldSettled  = "settled"
	HoldReleased = "released"
)

// Settlement is the coordinator's account of one job's money.
type Settlement struct {
	JobID            string `json:"job"`
	State            string `json:"state"`
	RatePaisePerHour int64  `json:"rate"`
	Held             int64  `json:"held"`
	Seconds          int64  `json:"seconds"`
	Charged          int64  `json:"charged"`
	Fee              int64  `json:"fee"`
	ProviderPaid     int64  `json:"provider_paid"`
	Reason           string `json:"reason,omitempty"`
	// FailedRunsCharged: the buyer's failed-run allowance is used up, so
	// a run the script fails will be charged.
	FailedRunsCharged bool `json:"failed_runs_charged,omitempty"`
}

// BalanceRequest asks for the signer's own balance, or one of its
// sub-accounts'.
type BalanceRequest struct {
	Account string `json:"account,omitempty"`
}

// Balance is an account's money.
type Balance struct {
	Account   string `json:"account"`
	Available int64  `json:"available"`
	Held      int64  `json:"held"`
	Earned    int64  `json:"earned"`
	// FailedAllowanceSeconds is how much failed-run time is still free
	// this week; at zero, a failed run is charged.
	FailedAllowanceSeconds int64 `json:"failed_allowance_s"`
}

// CreditRequest moves money into an account. Only an operator may send
// it. Key makes a retry harmless.
type CreditRequest struct {
	Key     string `json:"key"`
	Account string `json:"account"` // "buyer:PEER" or "provider:PEER"
	Amount  int64  `json:"amount"`
	Reason  string `json:"reason"`
}

// PayoutRequest moves the signer's provider earnings out of the market.
type PayoutRequest struct {
	Key    string `json:"key"`
	Amount int64  `json:"amount"`
}

// LedgerLeg is one account's side of a journal entry.
type LedgerLeg struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

// LedgerEntry is one journal entry.
type LedgerEntry struct {
	Seq    uint64      `json:"seq"`
	At     int64       `json:"at"`
	Kind   string      `json:"kind"`
	Job    string      `json:"job,omitempty"`
	Reason string      `json:"reason"`
	Legs   []LedgerLeg `json:"legs"`
	Hash   string      `json:"hash"`
}

// Posted answers a credit or payout with the entry it wrote.
type Posted struct {
	Entry LedgerEntry `json:"entry"`
}

// HistoryRequest asks for the journal entries of the signer's accounts
// (or of one of them, or of a sub-account: "buyer:PEER/NAME"); an
// operator may name any account, or "" for all.
type HistoryRequest struct {
	Account string `json:"account,omitempty"`
	Limit   int    `json:"limit,omitempty"`
}

// History is journal entries, oldest first.
type History struct {
	Entries []LedgerEntry `json:"entries"`
}

// VerifyRequest asks the coordinator to re-check its whole ledger (an
// operator's request).
type VerifyRequest struct{}

// VerifyReport is what the check found, and the head the coordinator
// signs (the envelope's signature covers it).
type VerifyReport struct {
	Entries   uint64   `json:"entries"`
	Accounts  int      `json:"accounts"`
	Holds     int      `json:"holds"`
	OpenHolds int      `json:"open_holds"`
	HeadSeq   uint64   `json:"head_seq"`
	HeadHash  string   `json:"head_hash"`
	Problems  []string `json:"problems"`
}

// Error is a refusal from the coordinator, with a sentence for the user.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error codes the coordinator sends.
const (
	CodeInsufficientFunds = "insufficient_funds"
	CodeUnknownTier       = "unknown_tier"
	CodeBadRequest        = "bad_request"
	CodeForbidden         = "forbidden"
	CodeNotFound          = "not_found"
	CodeConflict          = "conflict"
	CodeInternal          = "internal"
)

// Error lets a coordinator refusal travel as a Go error; its message is
// already a sentence for the user.
func (e *Error) Error() string { return e.Message }

func (JobRequest) Kind() string        { return "job_request" }
func (Offer) Kind() string             { return "offer" }
func (Accept) Kind() string            { return "accept" }
func (Confirm) Kind() string           { return "confirm" }
func (Decline) Kind() string           { return "decline" }
func (Commit) Kind() string            { return "commit" }
func (Heartbeat) Kind() string         { return "heartbeat" }
func (Started) Kind() string           { return "started" }
func (Log) Kind() string               { return "log" }
func (Telemetry) Kind() string         { return "telemetry" }
func (Finished) Kind() string          { return "finished" }
func (Cancel) Kind() string            { return "cancel" }
func (RateCard) Kind() string          { return "rate_card" }
func (RateCardRequest) Kind() string   { return "rate_card_request" }
func (HoldRequest) Kind() string       { return "hold_request" }
func (StartNotice) Kind() string       { return "start_notice" }
func (EndNotice) Kind() string         { return "end_notice" }
func (CancelNotice) Kind() string      { return "cancel_notice" }
func (AbortNotice) Kind() string       { return "abort_notice" }
func (ReceiptNotice) Kind() string     { return "receipt_notice" }
func (SettlementRequest) Kind() string { return "settlement_request" }
func (Settlement) Kind() string        { return "settlement" }
func (BalanceRequest) Kind() string    { return "balance_request" }
func (Balance) Kind() string           { return "balance" }
func (Error) Kind() string             { return "error" }
func (CreditRequest) Kind() string     { return "credit_request" }
func (PayoutRequest) Kind() string     { return "payout_request" }
func (Posted) Kind() string            { return "posted" }
func (HistoryRequest) Kind() string    { return "history_request" }
func (History) Kind() string           { return "history" }
func (VerifyRequest) Kind() string     { return "verify_request" }
func (VerifyReport) Kind() string      { return "verify_report" }

// newMessage returns an empty message of a kind, for decoding.
func newMessage(kind string) (Message, bool) {
	switch kind {
	case "job_request":
		return &JobRequest{}, true
	case "offer":
		return &Offer{}, true
	case "accept":
		return &Accept{}, true
	case "confirm":
		return &Confirm{}, true
	case "decline":
		return &Decline{}, true
	case "commit":
		return &Commit{}, true
	case "heartbeat":
		return &Heartbeat{}, true
	case "started":
		return &Started{}, true
	case "log":
		return &Log{}, true
	case "telemetry":
		return &Telemetry{}, true
	case "finished":
		return &Finished{}, true
	case "cancel":
		return &Cancel{}, true
	case "rate_card":
		return &RateCard{}, true
	case "rate_card_request":
		return &RateCardRequest{}, true
	case "hold_request":
		return &HoldRequest{}, true
	case "start_notice":
		return &StartNotice{}, true
	case "end_notice":
		return &EndNotice{}, true
	case "cancel_notice":
		return &CancelNotice{}, true
	case "abort_notice":
		return &AbortNotice{}, true
	case "receipt_notice":
		return &ReceiptNotice{}, true
	case "settlement_request":
		return &SettlementRequest{}, true
	case "settlement":
		return &Settlement{}, true
	case "balance_request":
		return &BalanceRequest{}, true
	case "balance":
		return &Balance{}, true
	case "error":
		return &Error{}, true
	case "credit_request":
		return &CreditRequest{}, true
	case "payout_request":
		return &PayoutRequest{}, true
	case "posted":
		return &Posted{}, true
	case "history_request":
		return &HistoryRequest{}, true
	case "history":
		return &History{}, true
	case "verify_request":
		return &VerifyRequest{}, true
	case "verify_report":
		return &VerifyReport{}, true
	}
	return nil, false
}
