package node

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trisparc/gaas/api"
	"github.com/trisparc/gaas/coordinator"
	"github.com/trisparc/gaas/inputs"
	"github.com/trisparc/gaas/internal/metricstest"
	"github.com/trisparc/gaas/store"
)

// startBuyer starts a coordinator and one buyer node on loopback; change
// adjusts the node's config.
func startBuyer(t testing.TB, change ...func(*Config)) (*Node, *coordinator.Coordinator) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	co, err := coordinator.Start(coordinator.Config{DataDir: filepath.Join(t.TempDir(), "c"), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { co.Close() })
	cfg := Config{DataDir: filepath.Join(t.TempDir(), "b"), Coordinator: co.Peer.Addrs()[0], Logger: log}
	for _, c := range change {
		c(&cfg)
	}
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n, co
}

func request(t *testing.T, n *Node, method, path, token, contentType string, body io.Reader) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, n.APIURL()+path, body)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func TestAPIRefusesBadRequests(t *testing.T) {
	n, _ := startBuyer(t)
	tok := n.Token()
	for _, tc := range []struct {
		name, method, path, token, ct, body string
		status                              int
		code                                string
	}{
		{"health needs no token", "GET", "/api/health", "", "", "", 200, ""},
		{"no token", "GET", "/api/tiers", "", "", "", 401, api.CodeUnauthorized},
		{"wrong token", "GET", "/api/jobs", "nope", "", "", 401, api.CodeUnauthorized},
		{"unknown route", "GET", "/api/nothing", tok, "", "", 404, api.CodeNotFound},
		{"job as text", "POST", "/api/jobs", tok, "text/plain", `{}`, 415, api.CodeBadRequest},
		{"malformed JSON", "POST", "/api/jobs", tok, "application/json", `{"tier":`, 400, api.CodeBadRequest},
		{"unknown field", "POST", "/api/jobs", tok, "application/json", `{"tier":"pro","gpu":"free"}`, 400, api.CodeBadRequest},
		{"oversized JSON", "POST", "/api/jobs", tok, "application/json", `{"tier":"` + strings.Repeat("x", 100<<10) + `"}`, 400, api.CodeBadRequest},
		{"unknown tier", "POST", "/api/jobs", tok, "application/json", `{"tier":"ultra"}`, 400, api.CodeUnknownTier},
		{"dataset never uploaded", "POST", "/api/jobs", tok, "application/json", `{"tier":"pro","dataset":"bafkxyz","script":"bafkxyz"}`, 400, api.CodeInvalidInput},
		{"dataset without a name", "POST", "/api/datasets", tok, "text/csv", "a,b\n1,2\n", 400, api.CodeBadRequest},
		{"dataset not .csv", "POST", "/api/datasets?name=data.xlsx", tok, "text/csv", "a,b\n1,2\n", 400, api.CodeInvalidInput},
		{"dataset path", "POST", "/api/datasets?name=../../etc/x.csv", tok, "text/csv", "a,b\n1,2\n", 400, api.CodeInvalidInput},
		{"empty dataset", "POST", "/api/datasets?name=d.csv", tok, "text/csv", "", 422, api.CodeInvalidInput},
		{"dataset as a form", "POST", "/api/datasets?name=d.csv", tok, "multipart/form-data; boundary=x", "--x\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\na,b\n1,2\n\r\n--x--\r\n", 415, api.CodeBadRequest},
		{"script too large", "POST", "/api/scripts?name=t.py", tok, "text/x-python", "def main():\n    pass\n#" + strings.Repeat("x", inputs.MaxScriptSize), 413, api.CodeTooLarge},
		{"script as a form", "POST", "/api/scripts?name=t.py", tok, "multipart/form-data; boundary=x", "--x--\r\n", 415, api.CodeBadRequest},
		{"script without main", "POST", "/api/scripts?name=t.py", tok, "text/x-python", "x = 1\n", 422, api.CodeInvalidInput},
		{"unknown job", "GET", "/api/jobs/j-404", tok, "", "", 404, api.CodeNotFound},
		{"bad paging", "GET", "/api/jobs?limit=lots", tok, "", "", 400, api.CodeBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := request(t, n, tc.method, tc.path, tc.token, tc.ct, strings.NewReader(tc.body))
			if status != tc.status || (tc.code != "" && (body["code"] != tc.code || body["error"] == "")) {
				t.Fatalf("%d %v, want %d %s", status, body, tc.status, tc.code)
			}
		})
	}
}

// TestHoldRefusedStoresNothing: a buyer without funds gets a clear
// refusal, and no job is stored.
func TestHoldRefusedStoresNothing(t *testing.T) {
	n, _ := startBuyer(t)
	ctx := context.Background()
	ds, err := n.UploadDataset(ctx, "d.csv", strings.NewReader("a,b\n1,2\n"))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := n.UploadScript(ctx, "t.py", strings.NewReader("def main():\n    pass\n"))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(api.JobSpec{Tier: "pro", Dataset: ds.CID, Script: sc.CID})
	status, body := request(t, n, "POST", "/api/jobs", n.Token(), "application/json", bytes.NewReader(data))
	if status != http.StatusPaymentRequired || !strings.Contains(body["error"].(string), "Not enough balance: this job can cost up to ₹50") {
		t.Fatalf("%d %v", status, body)
	}
	if jobs, total, _ := n.store.Jobs("*", 0, 10); total != 0 || len(jobs) != 0 {
		t.Fatalf("a refused job was stored: %+v", jobs)
	}
}

func TestStoreEventsAndPaging(t *testing.T) {
	s, err := store.Open(filepath.Join(t.TempDir(), "node.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, id := range []string{"a", "b", "c"} {
		j := store.Job{ID: id, CreatedAt: testTime(i)}
		j.SetState(store.Queued, j.CreatedAt)
		if err := s.CreateJob(j); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateJob(store.Job{ID: "a"}); err == nil {
		t.Fatal("a second job with the same ID was stored")
	}
	jobs, total, _ := s.Jobs("", 1, 1)
	if total != 3 || len(jobs) != 1 || jobs[0].ID != "b" {
		t.Fatalf("page 2 of 1: %d %+v", total, jobs)
	}
	s.AppendLogs("a", []store.Event{{Stream: "stdout", Line: "one"}, {Stream: "stdout", Line: "two"}})
	_, ev, _ := s.UpdateJob("a", func(j *store.Job) error { j.SetState(store.Running, testTime(9)); return nil })
	if ev == nil || ev.Seq != 4 || ev.State != store.Running {
		t.Fatalf("state event %+v", ev)
	}
	evs, _ := s.Events("a", 2)
	if len(evs) != 2 || evs[0].Line != "two" || evs[1].State != store.Running {
		t.Fatalf("events after 2: %+v", evs)
	}
	if _, err := s.Job("zzz"); err != store.ErrNotFound {
		t.Fatalf("missing job: %v", err)
	}
}

func testTime(i int) time.Time { return time.Date(2026, 11, 29, 12, i, 0, 0, time.UTC) }

// TestRateCardAnnounced: a node learns the coordinator's rate card from
// its announcements on gossipsub, without asking.
func TestRateCardAnnounced(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	card := filepath.Join(t.TempDir(), "card.json")
	os.WriteFile(card, []byte(`{"tiers":[{"name":"pro","title":"Pro","min_vram_mib":11776,"rate":4321}],"fee_bps":500}`), 0o644)
	co, err := coordinator.Start(coordinator.Config{DataDir: filepath.Join(t.TempDir(), "c"), RateCardFile: card, AnnounceEvery: 100 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	n, err := Start(Config{DataDir: filepath.Join(t.TempDir(), "b"), Coordinator: co.Peer.Addrs()[0], Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n.mu.Lock()
		got := n.card
		n.mu.Unlock()
		if got != nil {
			if got.Tiers[0].RatePaisePerHour != 4321 || got.FeeBasisPoints != 500 {
				t.Fatalf("announced card %+v", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no rate card announcement reached the node")
		}
		time.Sleep(50 * time.Millisecond)
	}
	tiers, err := n.Tiers(context.Background())
	if err != nil || len(tiers.Tiers) != 1 || tiers.Tiers[0].RateDisplay != "₹43.21/hr" {
		t.Fatalf("tiers %+v %v", tiers, err)
	}
}

// TestEveryDocumentedRoute asks a real node every route in the OpenAPI
// document: each is served (no "no such route"), and what the successful
// JSON ones answer has every property the document says is required.
func TestEveryDocumentedRoute(t *testing.T) {
	n, co := startBuyer(t)
	co.Ledger.Credit("test", "buyer:"+n.ID().String(), 10000, "test")
	var doc struct {
		Paths      map[string]map[string]json.RawMessage
		Components struct {
			Schemas map[string]struct {
				Required []string
			}
		}
	}
	status, raw := getRaw(t, n, "/api/openapi.json", "")
	if status != 200 || json.Unmarshal(raw, &doc) != nil || len(doc.Paths) < 15 {
		t.Fatalf("openapi.json: %d, %d paths", status, len(doc.Paths))
	}
	checked := 0
	for path, ops := range doc.Paths {
		for method, opRaw := range ops {
			var op struct {
				Responses map[string]struct {
					Content map[string]struct {
						Schema struct {
							Ref string `json:"$ref"`
						}
					}
				}
			}
			json.Unmarshal(opRaw, &op)
			url := strings.ReplaceAll(path, "{id}", "j-none")
			if path == "/api/estimate" {
				url += "?tier=pro&cap_seconds=600"
			}
			req, _ := http.NewRequest(strings.ToUpper(method), n.APIURL()+url, strings.NewReader("{}"))
			req.Header.Set("Authorization", "Bearer "+n.Token())
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(body), "There is no API route") || resp.StatusCode == http.StatusMethodNotAllowed {
				t.Errorf("%s %s is documented but not served", method, path)
				continue
			}
			ok, found := op.Responses["200"]
			if resp.StatusCode != 200 || !found {
				continue
			}
			ref := ok.Content["application/json"].Schema.Ref
			if ref == "" {
				continue
			}
			name := ref[strings.LastIndex(ref, "/")+1:]
			var got map[string]any
			if err := json.Unmarshal(body, &got); err != nil {
				t.Errorf("%s %s: %v", method, path, err)
				continue
			}
			for _, field := range doc.Components.Schemas[name].Required {
				if _, ok := got[field]; !ok {
					t.Errorf("%s %s answers a %s without %q", method, path, name, field)
				}
			}
			checked++
		}
	}
	if checked < 5 {
		t.Fatalf("only %d answers were checked against their schemas", checked)
	}
}

func getRaw(t *testing.T, n *Node, path, token string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(n.APIURL() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func TestTokens(t *testing.T) {
	n, _ := startBuyer(t)
	c := api.NewClient(n.APIURL(), n.Token())
	ctx := context.Background()
	phone, err := c.CreateToken(ctx, "phone")
	if err != nil || len(phone.Secret) < 32 {
		t.Fatalf("new token: %+v %v", phone, err)
	}
	asPhone := api.NewClient(n.APIURL(), phone.Secret)
	if _, err := asPhone.Jobs(ctx, 0, 10); err != nil {
		t.Fatalf("the phone's token: %v", err)
	}
	list, _ := c.Tokens(ctx)
	if len(list) != 2 || list[0].ID != "owner" || list[1].Name != "phone" || list[1].LastUsed.IsZero() {
		t.Fatalf("tokens %+v", list)
	}
	raw, _ := json.Marshal(list)
	if strings.Contains(string(raw), phone.Secret) || strings.Contains(string(raw), n.Token()) {
		t.Fatal("the token list shows a secret")
	}
	if err := c.RevokeToken(ctx, phone.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := asPhone.Jobs(ctx, 0, 10); err == nil || !strings.Contains(err.Error(), "wrong API token") {
		t.Fatalf("a revoked token still works: %v", err)
	}
	if err := c.RevokeToken(ctx, "owner"); err == nil || !strings.Contains(err.Error(), "cannot be revoked") {
		t.Fatalf("revoking the owner token: %v", err)
	}
	if err := c.RevokeToken(ctx, "t-nope"); err == nil || !strings.Contains(err.Error(), "no token") {
		t.Fatalf("revoking an unknown token: %v", err)
	}
	if _, err := c.CreateToken(ctx, ""); err == nil {
		t.Fatal("a token without a name")
	}
	// Guessing is slowed: after ten wrong tokens, the address is refused
	// for a while, right token or not.
	guesser := api.NewClient(n.APIURL(), "guess")
	for i := 0; i < 10; i++ {
		guesser.Jobs(ctx, 0, 1)
	}
	if _, err := c.Jobs(ctx, 0, 1); err == nil || !strings.Contains(err.Error(), "Too many wrong API tokens") {
		t.Fatalf("after ten wrong tokens: %v", err)
	}
}

// TestAccounts: a node serving many users keeps each to their own jobs,
// files and money; another account's job answers 404.
func TestAccounts(t *testing.T) {
	n, co := startBuyer(t)
	ctx := context.Background()
	owner := api.NewClient(n.APIURL(), n.Token())
	tok, err := owner.CreateAccount(ctx, "karan")
	if err != nil {
		t.Fatal(err)
	}
	karan := api.NewClient(n.APIURL(), tok.Secret)
	if _, err := karan.CreateAccount(ctx, "mallory"); err == nil || !strings.Contains(err.Error(), "Only the node's owner") {
		t.Fatalf("an account making accounts: %v", err)
	}
	if _, err := owner.CreateAccount(ctx, "Karan!"); err == nil {
		t.Fatal("a bad account name was accepted")
	}
	if _, err := owner.CreateAccount(ctx, "karan"); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("the same account twice: %v", err)
	}
	// Karan's money is a sub-account of the node's at the coordinator.
	co.Ledger.Credit("top-up", "buyer:"+n.ID().String()+"/karan", 5000, "test")
	b, _ := karan.Balance(ctx)
	ob, _ := owner.Balance(ctx)
	if b.Available != 5000 || ob.Available != 0 {
		t.Fatalf("balances: karan %d, owner %d", b.Available, ob.Available)
	}
	ds, err := karan.UploadDataset(ctx, "d.csv", strings.NewReader("a,b\n1,2\n"))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := karan.UploadScript(ctx, "t.py", strings.NewReader("def main():\n    pass\n"))
	if err != nil {
		t.Fatal(err)
	}
	// The owner cannot start a job with karan's files...
	if _, err := owner.CreateJob(ctx, api.JobSpec{Tier: "starter", Dataset: ds.CID, Script: sc.CID}); err == nil || !strings.Contains(err.Error(), "was not uploaded") {
		t.Fatalf("another account's upload: %v", err)
	}
	// ...karan can, paid from karan's money.
	job, err := karan.CreateJob(ctx, api.JobSpec{Tier: "starter", Dataset: ds.CID, Script: sc.CID, CapSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := karan.Balance(ctx); b.Held != 500 {
		t.Fatalf("karan's hold: %+v", b)
	}
	if _, err := owner.Job(ctx, job.ID); err == nil || !strings.Contains(err.Error(), "no job") {
		t.Fatalf("the owner reading karan's job: %v", err)
	}
	if _, err := owner.CancelJob(ctx, job.ID); err == nil {
		t.Fatal("the owner cancelled karan's job")
	}
	if l, _ := owner.Jobs(ctx, 0, 10); l.Total != 0 {
		t.Fatalf("the owner lists %d jobs", l.Total)
	}
	if l, _ := karan.Jobs(ctx, 0, 10); l.Total != 1 {
		t.Fatalf("karan lists %d jobs", l.Total)
	}
	if _, err := karan.Payout(ctx, 1, ""); err == nil {
		t.Fatal("an account paid provider earnings out")
	}
	if toks, _ := karan.Tokens(ctx); len(toks) != 1 || toks[0].Account != "karan" {
		t.Fatalf("karan's tokens %+v", toks)
	}
	if err := karan.RevokeToken(ctx, "owner"); err == nil {
		t.Fatal("karan revoked the owner's token")
	}
	h, err := karan.History(ctx)
	if err != nil || len(h) != 2 { // the top-up and the hold
		t.Fatalf("karan's history: %d entries, %v", len(h), err)
	}
	if _, err := karan.CancelJob(ctx, job.ID); err != nil {
		t.Fatal(err)
	}
}

func TestHealthzAndMetrics(t *testing.T) {
	n, _ := startBuyer(t)
	status, body := getRaw(t, n, "/healthz", "")
	if status != 200 || string(body) != "ok\n" {
		t.Fatalf("/healthz: %d %q", status, body)
	}
	if status, out := request(t, n, "GET", "/metrics", "", "", nil); status != 401 || out["code"] != api.CodeUnauthorized {
		t.Fatalf("/metrics without a token: %d %v", status, out)
	}
	guest, err := n.CreateAccount(context.Background(), "guest")
	if err != nil {
		t.Fatal(err)
	}
	if status, out := request(t, n, "GET", "/metrics", guest.Secret, "", nil); status != 403 || out["code"] != api.CodeForbidden {
		t.Fatalf("/metrics for an account: %d %v", status, out)
	}
	if _, err := n.UploadDataset(context.Background(), "d.csv", strings.NewReader("a,b\n1,2\n")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := api.NewClient(n.APIURL(), n.Token()).WriteMetrics(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	m := metricstest.Parse(buf.String())
	for name, want := range map[string]float64{
		`gaas_jobs{state="queued"}`:               0,
		`gaas_jobs{state="completed"}`:            0,
		`gaas_api_bytes_total{direction="upload"}`: 8,
		`gaas_provider_online`:                    0,
		`gaas_match_seconds_count`:                0,
		`gaas_block_bytes_total{direction="sent"}`: 0,
	} {
		if got, ok := m[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	n.Close()
	if err := n.Live(context.Background()); err == nil {
		t.Fatal("a closed node says it is live")
	}
}

// Each kind of bad dataset gets its own sentence (and line, where there
// is one) through the API, and leaves no block and no upload behind.
func TestDatasetUploads(t *testing.T) {
	n, _ := startBuyer(t, func(c *Config) { c.MaxDatasetBytes = 4 << 20 })
	blockFiles := func() int {
		count := 0
		filepath.WalkDir(filepath.Join(n.cfg.DataDir, "blocks"), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				count++
			}
			return nil
		})
		return count
	}
	big := "a,b\n" + strings.Repeat("12345,67890\n", 5<<20/12)
	badLate := "a,b\n" + strings.Repeat("1,2\n", 300000) + "1,2,3\n" // past the first megabyte
	for _, tc := range []struct {
		name, body string
		status     int
		code, text string
		line       float64
	}{
		{"empty", "", 422, api.CodeInvalidInput, "The dataset is empty", 0},
		{"binary", "PK\x03\x04\x00\x00zip", 422, api.CodeInvalidInput, "not a CSV file", 0},
		{"header only", "a,b,c\n", 422, api.CodeInvalidInput, "no rows of data", 1},
		{"columns differ", "a,b\n1,2\n3\n", 422, api.CodeInvalidInput, "Line 3 of the dataset has a different number of columns", 3},
		{"columns differ late", badLate, 422, api.CodeInvalidInput, "Line 300002 of the dataset has a different number of columns", 300002},
		{"bad encoding", "name,city\nA,Pune\nB,M\xfcnchen\n", 422, api.CodeInvalidInput, "Line 3 of the dataset is not valid UTF-8", 3},
		{"stray quote", "a,b\n1,x\"y\n", 422, api.CodeInvalidInput, "Line 2 of the dataset has a stray or unclosed quote", 2},
		{"too large", big, 413, api.CodeTooLarge, "larger than this node accepts (4 MB)", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := blockFiles()
			status, out := request(t, n, "POST", "/api/datasets?name=d.csv", n.Token(), "text/csv", strings.NewReader(tc.body))
			msg, _ := out["error"].(string)
			if status != tc.status || out["code"] != tc.code || !strings.Contains(msg, tc.text) {
				t.Fatalf("%d %v, want %d %s %q", status, out, tc.status, tc.code, tc.text)
			}
			if tc.line > 0 {
				if d, _ := out["details"].(map[string]any); d["line"] != tc.line {
					t.Fatalf("details %v, want line %v", out["details"], tc.line)
				}
			}
			if after := blockFiles(); after != before {
				t.Fatalf("%d block files before, %d after a refused upload", before, after)
			}
		})
	}
	// A good one answers what the file holds, and a second upload of it
	// is the same dataset.
	good := "age;income;target\n31;52000;1\n45;61000;0\n"
	var first any
	for range 2 {
		status, out := request(t, n, "POST", "/api/datasets?name=people.csv", n.Token(), "text/csv", strings.NewReader(good))
		if status != 201 || out["rows"] != 2.0 || out["columns"] != 3.0 || out["delimiter"] != ";" || !strings.HasPrefix(out["cid"].(string), "bafk") {
			t.Fatalf("%d %v", status, out)
		}
		if first == nil {
			first = out["cid"]
		} else if out["cid"] != first {
			t.Fatalf("the same file stored as %v and %v", first, out["cid"])
		}
		if h, _ := out["header"].([]any); len(h) != 3 || h[2] != "target" {
			t.Fatalf("header %v", out["header"])
		}
	}
}

// A failure inside the node answers a reference to its log, never the
// error's own text with the node's paths in it.
func TestInternalErrorsHideInternals(t *testing.T) {
	n, _ := startBuyer(t)
	if err := os.RemoveAll(filepath.Join(n.cfg.DataDir, "blocks")); err != nil {
		t.Fatal(err)
	}
	status, out := request(t, n, "POST", "/api/datasets?name=d.csv", n.Token(), "text/csv", strings.NewReader("a,b\n1,2\n"))
	msg, _ := out["error"].(string)
	if status != 500 || out["code"] != api.CodeInternal || !strings.Contains(msg, "under reference") {
		t.Fatalf("%d %v", status, out)
	}
	for _, leak := range []string{n.cfg.DataDir, "/", "goroutine", ".go:"} {
		if strings.Contains(strings.TrimSuffix(msg, "."), leak) {
			t.Fatalf("the answer shows %q: %s", leak, msg)
		}
	}
}

func TestPackageChipsCheckedInPlace(t *testing.T) {
	n, _ := startBuyer(t)
	c := api.NewClient(n.APIURL(), n.Token())
	res, err := c.CheckPackages(context.Background(), []string{"numpy", " torch == 2.2.0 ", "-e .", "git+https://x/y", "NumPy>=1.26", "pandas[performance]>=2,<3"})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ pkg, err string }{
		{"numpy", ""},
		{"torch==2.2.0", ""},
		{"", "is a pip option, not a package"},
		{"", "is a URL or direct reference"},
		{"", `package "numpy" is listed twice`},
		{"pandas[performance]>=2,<3", ""},
	}
	if res.OK || len(res.Chips) != len(want) {
		t.Fatalf("%+v", res)
	}
	for i, w := range want {
		got := res.Chips[i]
		if got.Package != w.pkg || (w.err == "") != (got.Error == "") || !strings.Contains(got.Error, w.err) {
			t.Errorf("chip %q: %+v, want package %q error %q", got.Chip, got, w.pkg, w.err)
		}
	}
	if res, err := c.CheckPackages(context.Background(), []string{"scikit-learn>=1.3"}); err != nil || !res.OK {
		t.Fatalf("%+v %v", res, err)
	}
	if status, out := request(t, n, "POST", "/api/packages/check", n.Token(), "application/json", strings.NewReader(`["numpy"]`)); status != 400 || out["code"] != api.CodeBadRequest {
		t.Fatalf("a bare list: %d %v", status, out)
	}
}
