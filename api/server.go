package api

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// maxJSONBody bounds JSON request bodies; uploads have their own limits.
const maxJSONBody = 64 << 10

// route is one API route: how it is served and how the OpenAPI document
// describes it. The table is the single source of both.
type route struct {
	method, path, summary string
	public                bool // no token needed
	query                 []param
	body                  any // JSON request type; a string is a raw content type
	status                int // success status
	result                any // JSON response type; a string is a raw content type
	handle                func(*server) http.HandlerFunc
}

type param struct{ name, typ, doc string }

var routes = []route{
	{method: "GET", path: "/healthz", summary: "Liveness for a supervisor: 200 while the node serves, 503 while it shuts down; asks nothing of the network", public: true, status: 200, result: "text/plain", handle: func(s *server) http.HandlerFunc { return s.healthz }},
	{method: "GET", path: "/metrics", summary: "Prometheus metrics: jobs by state, matching latency, bytes moved, sandbox runs and failures (owner only)", status: 200, result: "text/plain", handle: func(s *server) http.HandlerFunc { return s.metrics }},
	{method: "GET", path: "/api/health", summary: "Liveness, peer ID, the coordinator, a provider's sandbox limits", public: true, status: 200, result: Health{}, handle: func(s *server) http.HandlerFunc { return s.health }},
	{method: "GET", path: "/api/openapi.json", summary: "This document", public: true, status: 200, result: "application/json", handle: func(s *server) http.HandlerFunc { return serveOpenAPI }},
	{method: "GET", path: "/api/tiers", summary: "The rate card", status: 200, result: Tiers{}, handle: func(s *server) http.HandlerFunc { return s.tiers }},
	{method: "GET", path: "/api/estimate", summary: "The price of a job before it starts", query: []param{{"tier", "string", "starter, pro or max"}, {"cap_seconds", "integer", "budget cap (default 3600)"}}, status: 200, result: Estimate{}, handle: func(s *server) http.HandlerFunc { return s.estimate }},
	{method: "POST", path: "/api/datasets", summary: "Upload and check a CSV (streamed)", query: []param{{"name", "string", "the file's name, ending .csv"}}, body: "text/csv", status: 201, result: Dataset{}, handle: func(s *server) http.HandlerFunc { return s.uploadDataset }},
	{method: "POST", path: "/api/scripts", summary: "Upload a script; check its main() with Python's parser", query: []param{{"name", "string", "the file's name, ending .py"}}, body: "text/x-python", status: 201, result: Script{}, handle: func(s *server) http.HandlerFunc { return s.uploadScript }},
	{method: "POST", path: "/api/packages/check", summary: "Check package chips as they are typed: each is a name with an optional version, or is refused with the reason", body: PackagesRequest{}, status: 200, result: PackageCheck{}, handle: func(s *server) http.HandlerFunc { return s.checkPackages }},
	{method: "POST", path: "/api/jobs", summary: "Hold the most the job can cost and queue it", body: JobSpec{}, status: 201, result: Job{}, handle: func(s *server) http.HandlerFunc { return s.createJob }},
	{method: "GET", path: "/api/jobs", summary: "Jobs, newest first", query: []param{{"offset", "integer", "jobs to skip"}, {"limit", "integer", "at most this many (default 50)"}}, status: 200, result: JobList{}, handle: func(s *server) http.HandlerFunc { return s.listJobs }},
	{method: "GET", path: "/api/jobs/{id}", summary: "One job", status: 200, result: Job{}, handle: func(s *server) http.HandlerFunc { return s.job }},
	{method: "POST", path: "/api/jobs/{id}/cancel", summary: "Cancel; a running job is charged for its seconds and delivers no model", status: 200, result: Job{}, handle: func(s *server) http.HandlerFunc { return s.cancelJob }},
	{method: "POST", path: "/api/jobs/{id}/retry", summary: "A new job with this job's inputs; fields given replace them (edit and retry)", body: JobSpec{}, status: 201, result: Job{}, handle: func(s *server) http.HandlerFunc { return s.retryJob }},
	{method: "GET", path: "/api/jobs/{id}/events", summary: "Server-sent events: states, notices, output lines (resumable with Last-Event-ID), telemetry", query: []param{{"after", "integer", "resume after this event"}}, status: 200, result: "text/event-stream", handle: func(s *server) http.HandlerFunc { return s.events }},
	{method: "GET", path: "/api/jobs/{id}/logs", summary: "The job's logged events", status: 200, result: []Event{}, handle: func(s *server) http.HandlerFunc { return s.logs }},
	{method: "GET", path: "/api/jobs/{id}/model", summary: "The model: a file as itself (ranges work), a folder as .tar.gz or .zip", query: []param{{"format", "string", "zip or tar.gz, for a folder"}}, status: 200, result: "application/octet-stream", handle: func(s *server) http.HandlerFunc { return s.model }},
	{method: "GET", path: "/api/balance", summary: "Available, held and earned; the failed-run allowance", status: 200, result: Balance{}, handle: func(s *server) http.HandlerFunc { return s.balance }},
	{method: "GET", path: "/api/accounts", summary: "The node's accounts (owner only)", status: 200, result: []Account{}, handle: func(s *server) http.HandlerFunc { return s.accounts }},
	{method: "POST", path: "/api/accounts", summary: "Make an account with its first token (owner only); it sees only its own jobs, files and balance", body: AccountRequest{}, status: 201, result: NewToken{}, handle: func(s *server) http.HandlerFunc { return s.createAccount }},
	{method: "GET", path: "/api/tokens", summary: "API tokens (names and IDs, never secrets)", status: 200, result: []Token{}, handle: func(s *server) http.HandlerFunc { return s.tokens }},
	{method: "POST", path: "/api/tokens", summary: "Make a named token, for a phone or a script; its secret is shown once", body: TokenRequest{}, status: 201, result: NewToken{}, handle: func(s *server) http.HandlerFunc { return s.createToken }},
	{method: "DELETE", path: "/api/tokens/{id}", summary: "Revoke a token", status: 204, result: "text/plain", handle: func(s *server) http.HandlerFunc { return s.revokeToken }},
	{method: "GET", path: "/api/ledger/history", summary: "This node's ledger entries", status: 200, result: []LedgerEntry{}, handle: func(s *server) http.HandlerFunc { return s.history }},
	{method: "POST", path: "/api/ledger/payout", summary: "Pay provider earnings out", body: PayoutRequest{}, status: 201, result: LedgerEntry{}, handle: func(s *server) http.HandlerFunc { return s.payout }},
}

// Handler serves svc over HTTP under /api/, checking the bearer token on
// every route but the public ones.
func Handler(svc Service, auth Authenticator, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &server{svc: svc, authn: auth, log: log, failures: map[string]*failures{}}
	mux := http.NewServeMux()
	for _, r := range routes {
		h := r.handle(s)
		if !r.public {
			h = s.auth(h)
		}
		mux.HandleFunc(r.method+" "+r.path, h)
	}
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, Errorf(http.StatusNotFound, CodeNotFound, "There is no API route %s %s.", r.Method, r.URL.Path))
	})
	return mux
}

type server struct {
	svc   Service
	authn Authenticator
	log   *slog.Logger

	mu       sync.Mutex
	failures map[string]*failures // by client address
}

// failures counts wrong tokens from one address, to slow guessing.
type failures struct {
	count int
	since time.Time
}

// Wrong tokens allowed per address per window before it is refused.
const (
	maxAuthFailures  = 10
	authFailureSpell = time.Minute
)

func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func (s *server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		addr := clientAddr(r)
		s.mu.Lock()
		f := s.failures[addr]
		if f != nil && time.Since(f.since) > authFailureSpell {
			delete(s.failures, addr)
			f = nil
		}
		blocked := f != nil && f.count >= maxAuthFailures
		s.mu.Unlock()
		if blocked {
			w.Header().Set("Retry-After", "60")
			s.writeError(w, Errorf(http.StatusTooManyRequests, CodeUnauthorized, "Too many wrong API tokens from this address; wait a minute and try again."))
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		var account string
		if ok {
			account, ok = s.authn.Authenticate(got)
		}
		if !ok {
			s.mu.Lock()
			if f = s.failures[addr]; f == nil {
				if len(s.failures) > 1000 {
					for a, old := range s.failures { // forget spells long over
						if time.Since(old.since) > authFailureSpell {
							delete(s.failures, a)
						}
					}
				}
				f = &failures{since: time.Now()}
				s.failures[addr] = f
			}
			f.count++
			s.mu.Unlock()
			s.writeError(w, Errorf(http.StatusUnauthorized, CodeUnauthorized, "Missing or wrong API token: pass it as 'Authorization: Bearer TOKEN' (the CLI reads GAAS_TOKEN)."))
			return
		}
		h(w, r.WithContext(WithAccount(r.Context(), account)))
	}
}

func (s *server) accounts(w http.ResponseWriter, r *http.Request) {
	a, err := s.svc.Accounts(r.Context())
	s.respond(w, http.StatusOK, a, err)
}

func (s *server) createAccount(w http.ResponseWriter, r *http.Request) {
	var req AccountRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		s.writeError(w, Errorf(http.StatusBadRequest, CodeBadRequest, "The account request is not valid JSON: %v.", err))
		return
	}
	t, err := s.svc.CreateAccount(r.Context(), req.Name)
	s.respond(w, http.StatusCreated, t, err)
}

func (s *server) tokens(w http.ResponseWriter, r *http.Request) {
	t, err := s.svc.Tokens(r.Context())
	s.respond(w, http.StatusOK, t, err)
}

func (s *server) createToken(w http.ResponseWriter, r *http.Request) {
	var req TokenRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		s.writeError(w, Errorf(http.StatusBadRequest, CodeBadRequest, "The token request is not valid JSON: %v.", err))
		return
	}
	t, err := s.svc.CreateToken(r.Context(), req.Name)
	s.respond(w, http.StatusCreated, t, err)
}

func (s *server) revokeToken(w http.ResponseWriter, r *http.Request) {
	if err := s.svc.RevokeToken(r.Context(), r.PathValue("id")); err != nil {
		s.writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// writeError answers with an API error as it is. Any other error is the
// node's own failure: its text can hold paths and internals, so it goes to
// the node's log under a reference, and the answer gives the reference.
func (s *server) writeError(w http.ResponseWriter, err error) {
	var e *Error
	switch {
	case errors.As(err, &e):
	case errors.Is(err, syscall.ENOSPC):
		e = Errorf(http.StatusInsufficientStorage, CodeUnavailable, "The node's disk is full, so it cannot store this now. Try again later, or ask the node's owner to free some space.")
	default:
		ref := make([]byte, 4)
		rand.Read(ref)
		s.log.Error("API request failed", "ref", hex.EncodeToString(ref), "err", err)
		e = Errorf(http.StatusInternalServerError, CodeInternal, "The node hit an internal error and could not finish this request; its log has the details under reference %x.", ref)
	}
	if e.Status == 0 {
		e.Status = http.StatusBadRequest
	}
	writeJSON(w, e.Status, e)
}

func (s *server) respond(w http.ResponseWriter, status int, v any, err error) {
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, status, v)
}

func (s *server) healthz(w http.ResponseWriter, r *http.Request) {
	if err := s.svc.Live(r.Context()); err != nil {
		s.writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("ok\n"))
}

func (s *server) metrics(w http.ResponseWriter, r *http.Request) {
	var buf bytes.Buffer // an error must not follow half a body
	if err := s.svc.WriteMetrics(r.Context(), &buf); err != nil {
		s.writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write(buf.Bytes())
}

func (s *server) health(w http.ResponseWriter, r *http.Request) {
	h, err := s.svc.Health(r.Context())
	s.respond(w, http.StatusOK, h, err)
}

func (s *server) tiers(w http.ResponseWriter, r *http.Request) {
	t, err := s.svc.Tiers(r.Context())
	s.respond(w, http.StatusOK, t, err)
}

// uploadName is an upload's file name; the body must be the file itself.
func uploadName(r *http.Request, ext string) (string, error) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); strings.HasPrefix(mt, "multipart/") {
		return "", Errorf(http.StatusUnsupportedMediaType, CodeBadRequest, "Send the file's bytes as the request body, not as a form (%s); for example: curl --data-binary @FILE%s.", mt, ext)
	}
	name := r.URL.Query().Get("name")
	if name == "" {
		return "", Errorf(http.StatusBadRequest, CodeBadRequest, "Give the file's name as ?name=FILE%s.", ext)
	}
	return name, nil
}

func (s *server) uploadDataset(w http.ResponseWriter, r *http.Request) {
	name, err := uploadName(r, ".csv")
	if err != nil {
		s.writeError(w, err)
		return
	}
	d, err := s.svc.UploadDataset(r.Context(), name, r.Body)
	s.respond(w, http.StatusCreated, d, err)
}

func (s *server) uploadScript(w http.ResponseWriter, r *http.Request) {
	name, err := uploadName(r, ".py")
	if err != nil {
		s.writeError(w, err)
		return
	}
	d, err := s.svc.UploadScript(r.Context(), name, r.Body)
	s.respond(w, http.StatusCreated, d, err)
}

func (s *server) checkPackages(w http.ResponseWriter, r *http.Request) {
	var req PackagesRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		s.writeError(w, Errorf(http.StatusBadRequest, CodeBadRequest, "The packages are not valid JSON (expected {\"packages\": [\"numpy\", \"torch==2.2.0\"]}): %v.", err))
		return
	}
	c, err := s.svc.CheckPackages(r.Context(), req.Packages)
	s.respond(w, http.StatusOK, c, err)
}

func (s *server) createJob(w http.ResponseWriter, r *http.Request) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		s.writeError(w, Errorf(http.StatusUnsupportedMediaType, CodeBadRequest, "Send the job as JSON (Content-Type: application/json)."))
		return
	}
	var spec JobSpec
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		s.writeError(w, Errorf(http.StatusBadRequest, CodeBadRequest, "The job is not valid JSON: %v.", err))
		return
	}
	j, err := s.svc.CreateJob(r.Context(), spec)
	s.respond(w, http.StatusCreated, j, err)
}

func queryInt(r *http.Request, name string, def int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, Errorf(http.StatusBadRequest, CodeBadRequest, "%s must be a whole number, not %q.", name, v)
	}
	return n, nil
}

func (s *server) listJobs(w http.ResponseWriter, r *http.Request) {
	offset, err := queryInt(r, "offset", 0)
	if err != nil {
		s.writeError(w, err)
		return
	}
	limit, err := queryInt(r, "limit", 50)
	if err != nil {
		s.writeError(w, err)
		return
	}
	l, err := s.svc.Jobs(r.Context(), offset, min(max(limit, 1), 500))
	s.respond(w, http.StatusOK, l, err)
}

func (s *server) job(w http.ResponseWriter, r *http.Request) {
	j, err := s.svc.Job(r.Context(), r.PathValue("id"))
	s.respond(w, http.StatusOK, j, err)
}

func (s *server) cancelJob(w http.ResponseWriter, r *http.Request) {
	j, err := s.svc.CancelJob(r.Context(), r.PathValue("id"))
	s.respond(w, http.StatusOK, j, err)
}

func (s *server) retryJob(w http.ResponseWriter, r *http.Request) {
	var change JobSpec
	if r.ContentLength != 0 {
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&change); err != nil && err != io.EOF {
			s.writeError(w, Errorf(http.StatusBadRequest, CodeBadRequest, "The changes are not valid JSON: %v.", err))
			return
		}
	}
	j, err := s.svc.RetryJob(r.Context(), r.PathValue("id"), change)
	s.respond(w, http.StatusCreated, j, err)
}

func (s *server) estimate(w http.ResponseWriter, r *http.Request) {
	capSeconds, err := queryInt(r, "cap_seconds", 3600)
	if err != nil {
		s.writeError(w, err)
		return
	}
	e, err := s.svc.Estimate(r.Context(), r.URL.Query().Get("tier"), int64(capSeconds))
	s.respond(w, http.StatusOK, e, err)
}

func (s *server) logs(w http.ResponseWriter, r *http.Request) {
	evs, err := s.svc.Logs(r.Context(), r.PathValue("id"))
	s.respond(w, http.StatusOK, evs, err)
}

// events streams server-sent events. A client that reconnects with
// Last-Event-ID (or ?after=N) gets everything after that event.
func (s *server) events(w http.ResponseWriter, r *http.Request) {
	after := uint64(0)
	for _, p := range []struct{ name, v string }{{"Last-Event-ID", r.Header.Get("Last-Event-ID")}, {"after", r.URL.Query().Get("after")}} {
		if p.v == "" {
			continue
		}
		n, err := strconv.ParseUint(p.v, 10, 64)
		if err != nil {
			s.writeError(w, Errorf(http.StatusBadRequest, CodeBadRequest, "%s must be an event number, not %q.", p.name, p.v))
			return
		}
		after = n
	}
	ch, err := s.svc.Events(r.Context(), r.PathValue("id"), after)
	if err != nil {
		s.writeError(w, err)
		return
	}
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}
	for ev := range ch {
		data, _ := json.Marshal(ev)
		if ev.Seq != 0 {
			fmt.Fprintf(w, "id: %d\n", ev.Seq)
		}
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.Kind, data)
		if flusher != nil {
			flusher.Flush()
		}
	}
}

func (s *server) model(w http.ResponseWriter, r *http.Request) {
	m, err := s.svc.Model(r.Context(), r.PathValue("id"), r.URL.Query().Get("format"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	defer m.Body.Close()
	w.Header().Set("Content-Type", m.ContentType)
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": m.Name}))
	w.Header().Set("X-Content-CID", m.CID)
	if rs, ok := m.Body.(io.ReadSeeker); ok && m.Size >= 0 {
		// Range requests and Content-Length come with ServeContent.
		http.ServeContent(w, r, m.Name, zeroTime, rs)
		return
	}
	io.Copy(w, m.Body)
}

func (s *server) balance(w http.ResponseWriter, r *http.Request) {
	b, err := s.svc.Balance(r.Context())
	s.respond(w, http.StatusOK, b, err)
}

func (s *server) history(w http.ResponseWriter, r *http.Request) {
	h, err := s.svc.History(r.Context())
	s.respond(w, http.StatusOK, h, err)
}

func (s *server) payout(w http.ResponseWriter, r *http.Request) {
	var req PayoutRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		s.writeError(w, Errorf(http.StatusBadRequest, CodeBadRequest, "The payout is not valid JSON: %v.", err))
		return
	}
	e, err := s.svc.Payout(r.Context(), req.Amount, req.Key)
	s.respond(w, http.StatusCreated, e, err)
}
