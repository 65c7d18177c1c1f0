package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

var zeroTime time.Time

// Client is a Service over HTTP.
type Client struct {
	Base  string // "http://127.0.0.1:7070"
	Token string
	HTTP  *http.Client
}

var _ Service = (*Client)(nil)

// ErrUnreachable wraps failures to reach the node at all.
var ErrUnreachable = errors.New("node unreachable")

// NewClient makes a client for the node at base.
func NewClient(base, token string) *Client {
	return &Client{Base: strings.TrimRight(base, "/"), Token: token, HTTP: &http.Client{}}
}

func (c *Client) do(ctx context.Context, method, path string, body io.Reader, contentType string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, body)
	if err != nil {
		return nil, fmt.Errorf("the node address %q is not a URL (expected like http://127.0.0.1:7070): %w", c.Base, err)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: could not reach the GaaS node at %s (%v). Is `gaas node` (or `gaas testnet`) running there? Set --node or GAAS_NODE", ErrUnreachable, c.Base, err)
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		e := &Error{Status: resp.StatusCode}
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if json.Unmarshal(data, e) != nil || e.Message == "" {
			e.Code, e.Message = CodeInternal, fmt.Sprintf("The node at %s answered %s: %s", c.Base, resp.Status, bytes.TrimSpace(data))
		}
		return nil, e
	}
	return resp, nil
}

func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	ct := ""
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ct = bytes.NewReader(data), "application/json"
	}
	resp, err := c.do(ctx, method, path, body, ct)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("reading the node's answer to %s %s: %w", method, path, err)
	}
	return nil
}

func (c *Client) Live(ctx context.Context) error {
	resp, err := c.do(ctx, "GET", "/healthz", nil, "")
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

func (c *Client) WriteMetrics(ctx context.Context, w io.Writer) error {
	resp, err := c.do(ctx, "GET", "/metrics", nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	return err
}

func (c *Client) Health(ctx context.Context) (h Health, err error) {
	return h, c.call(ctx, "GET", "/api/health", nil, &h)
}

func (c *Client) Tiers(ctx context.Context) (t Tiers, err error) {
	return t, c.call(ctx, "GET", "/api/tiers", nil, &t)
}

func (c *Client) upload(ctx context.Context, path, name, ct string, r io.Reader, out any) error {
	resp, err := c.do(ctx, "POST", path+"?name="+url.QueryEscape(name), r, ct)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(out)
}

func (c *Client) UploadDataset(ctx context.Context, name string, r io.Reader) (d Dataset, err error) {
	return d, c.upload(ctx, "/api/datasets", name, "text/csv", r, &d)
}

func (c *Client) UploadScript(ctx context.Context, name string, r io.Reader) (s Script, err error) {
	return s, c.upload(ctx, "/api/scripts", name, "text/x-python", r, &s)
}

func (c *Client) CheckPackages(ctx context.Context, chips []string) (p PackageCheck, err error) {
	return p, c.call(ctx, "POST", "/api/packages/check", PackagesRequest{Packages: chips}, &p)
}

func (c *Client) CreateJob(ctx context.Context, spec JobSpec) (j Job, err error) {
	return j, c.call(ctx, "POST", "/api/jobs", spec, &j)
}

func (c *Client) Jobs(ctx context.Context, offset, limit int) (l JobList, err error) {
	return l, c.call(ctx, "GET", fmt.Sprintf("/api/jobs?offset=%d&limit=%d", offset, limit), nil, &l)
}

func (c *Client) Job(ctx context.Context, id string) (j Job, err error) {
	return j, c.call(ctx, "GET", "/api/jobs/"+url.PathEscape(id), nil, &j)
}

func (c *Client) CancelJob(ctx context.Context, id string) (j Job, err error) {
	return j, c.call(ctx, "POST", "/api/jobs/"+url.PathEscape(id)+"/cancel", nil, &j)
}

func (c *Client) RetryJob(ctx context.Context, id string, change JobSpec) (j Job, err error) {
	return j, c.call(ctx, "POST", "/api/jobs/"+url.PathEscape(id)+"/retry", change, &j)
}

func (c *Client) Estimate(ctx context.Context, tier string, capSeconds int64) (e Estimate, err error) {
	return e, c.call(ctx, "GET", fmt.Sprintf("/api/estimate?tier=%s&cap_seconds=%d", url.QueryEscape(tier), capSeconds), nil, &e)
}

func (c *Client) Accounts(ctx context.Context) (a []Account, err error) {
	return a, c.call(ctx, "GET", "/api/accounts", nil, &a)
}

func (c *Client) CreateAccount(ctx context.Context, name string) (t NewToken, err error) {
	return t, c.call(ctx, "POST", "/api/accounts", AccountRequest{Name: name}, &t)
}

func (c *Client) Tokens(ctx context.Context) (t []Token, err error) {
	return t, c.call(ctx, "GET", "/api/tokens", nil, &t)
}

func (c *Client) CreateToken(ctx context.Context, name string) (t NewToken, err error) {
	return t, c.call(ctx, "POST", "/api/tokens", TokenRequest{Name: name}, &t)
}

func (c *Client) RevokeToken(ctx context.Context, id string) error {
	resp, err := c.do(ctx, "DELETE", "/api/tokens/"+url.PathEscape(id), nil, "")
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

func (c *Client) Logs(ctx context.Context, id string) (evs []Event, err error) {
	return evs, c.call(ctx, "GET", "/api/jobs/"+url.PathEscape(id)+"/logs", nil, &evs)
}

func (c *Client) History(ctx context.Context) (h []LedgerEntry, err error) {
	return h, c.call(ctx, "GET", "/api/ledger/history", nil, &h)
}

func (c *Client) Payout(ctx context.Context, amount int64, key string) (e LedgerEntry, err error) {
	return e, c.call(ctx, "POST", "/api/ledger/payout", PayoutRequest{Amount: amount, Key: key}, &e)
}

func (c *Client) Balance(ctx context.Context) (b Balance, err error) {
	return b, c.call(ctx, "GET", "/api/balance", nil, &b)
}

// Events follows the job's server-sent events, reconnecting with
// Last-Event-ID if the connection drops, until the job ends.
func (c *Client) Events(ctx context.Context, id string, after uint64) (<-chan Event, error) {
	path := "/api/jobs/" + url.PathEscape(id) + "/events"
	resp, err := c.do(ctx, "GET", path+"?after="+strconv.FormatUint(after, 10), nil, "")
	if err != nil {
		return nil, err
	}
	ch := make(chan Event, 64)
	go func() {
		defer close(ch)
		for {
			last, done := readSSE(ctx, resp.Body, ch)
			resp.Body.Close()
			if done || ctx.Err() != nil {
				return
			}
			if last > after {
				after = last
			}
			// The stream dropped before the job ended: pick up where it left off.
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
				if resp, err = c.do(ctx, "GET", path+"?after="+strconv.FormatUint(after, 10), nil, ""); err == nil {
					break
				}
				var e *Error
				if errors.As(err, &e) {
					return // the node answered, but refuses: nothing to resume
				}
			}
		}
	}()
	return ch, nil
}

// readSSE delivers events until the body ends; done reports a final state.
func readSSE(ctx context.Context, body io.Reader, ch chan<- Event) (last uint64, done bool) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var data []byte
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "data: "):
			data = append(data, line[len("data: "):]...)
		case line == "" && len(data) > 0:
			var ev Event
			if json.Unmarshal(data, &ev) == nil {
				if ev.Seq > last {
					last = ev.Seq
				}
				select {
				case ch <- ev:
				case <-ctx.Done():
					return last, true
				}
				if ev.Kind == EventState && Final(ev.State) {
					done = true
				}
			}
			data = data[:0]
		}
	}
	return last, done
}

// Final reports whether a job state is final.
func Final(state string) bool {
	return state == "completed" || state == "failed" || state == "cancelled"
}

// Model downloads a job's model.
func (c *Client) Model(ctx context.Context, id, format string) (*ModelFile, error) {
	path := "/api/jobs/" + url.PathEscape(id) + "/model"
	if format != "" {
		path += "?format=" + url.QueryEscape(format)
	}
	resp, err := c.do(ctx, "GET", path, nil, "")
	if err != nil {
		return nil, err
	}
	name := "model"
	if _, params, err := mime.ParseMediaType(resp.Header.Get("Content-Disposition")); err == nil && params["filename"] != "" {
		name = params["filename"]
	}
	return &ModelFile{Name: name, CID: resp.Header.Get("X-Content-CID"), Size: resp.ContentLength, ContentType: resp.Header.Get("Content-Type"), Body: resp.Body}, nil
}
