package node

import (
	"context"
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"
	"github.com/trisparc/gaas/api"
)

// metrics are the node's Prometheus metrics, in a registry of its own (the
// libraries' global one would mix in whatever they register).
type metrics struct {
	reg *prometheus.Registry

	match         prometheus.Histogram
	apiBytes      *prometheus.CounterVec
	sandboxRuns   *prometheus.CounterVec
	sandboxErrors *prometheus.CounterVec
}

func newMetrics(n *Node) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		match: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gaas_match_seconds",
			Help:    "From an attempt's first job request to a provider's confirm: DHT lookup, offers, the contract, and any time queued for a free provider.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		apiBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gaas_api_bytes_total",
			Help: "Bytes of datasets and scripts uploaded to the API, and of models downloaded from it.",
		}, []string{"direction"}),
		sandboxRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gaas_sandbox_runs_total",
			Help: "Jobs this provider ran in its sandbox, by how they ended.",
		}, []string{"outcome"}),
		sandboxErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gaas_sandbox_failures_total",
			Help: "Times the sandbox itself failed (not the buyer's script): it could not start a job, or could not install its packages.",
		}, []string{"stage"}),
	}
	for _, d := range []string{"upload", "download"} {
		m.apiBytes.WithLabelValues(d)
	}
	for _, s := range []string{"run", "packages"} {
		m.sandboxErrors.WithLabelValues(s)
	}
	m.reg.MustRegister(m.match, m.apiBytes, m.sandboxRuns, m.sandboxErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		jobStates{n},
		blockBytes("received", func() uint64 { r, _ := n.blocks.Transferred(); return r }),
		blockBytes("sent", func() uint64 { _, s := n.blocks.Transferred(); return s }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gaas_provider_online",
			Help: "1 while provider mode is on.",
		}, func() float64 {
			n.mu.Lock()
			defer n.mu.Unlock()
			if n.provider != nil {
				return 1
			}
			return 0
		}),
	)
	return m
}

func blockBytes(direction string, bytes func() uint64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name:        "gaas_block_bytes_total",
		Help:        "Bytes of blocks (datasets, scripts, models) moved over bitswap.",
		ConstLabels: prometheus.Labels{"direction": direction},
	}, func() float64 { return float64(bytes()) })
}

// jobStates reads the jobs by state from the store at each scrape, so the
// figure can never drift from what the node has stored.
type jobStates struct{ n *Node }

var jobStatesDesc = prometheus.NewDesc("gaas_jobs", "This node's jobs (every account's), by state.", []string{"state"}, nil)

func (j jobStates) Describe(ch chan<- *prometheus.Desc) { ch <- jobStatesDesc }

func (j jobStates) Collect(ch chan<- prometheus.Metric) {
	if !j.n.enter() {
		return
	}
	defer j.n.leave()
	counts, err := j.n.store.JobStates()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(jobStatesDesc, err)
		return
	}
	for state, c := range counts {
		ch <- prometheus.MustNewConstMetric(jobStatesDesc, prometheus.GaugeValue, float64(c), state)
	}
}

// WriteMetrics writes the node's metrics in Prometheus' text format. They
// cover every account, so only the owner may read them.
func (n *Node) WriteMetrics(ctx context.Context, w io.Writer) error {
	if api.AccountFrom(ctx) != "" {
		return api.Errorf(http.StatusForbidden, api.CodeForbidden, "Only the node's owner can read its metrics.")
	}
	families, err := n.metrics.reg.Gather()
	if err != nil {
		return err
	}
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			return err
		}
	}
	return nil
}

// Live reports whether the node is up; it asks nothing of the network,
// so a supervisor can poll it cheaply.
func (n *Node) Live(ctx context.Context) error {
	if n.ctx.Err() != nil {
		return api.Errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "The node is shutting down.")
	}
	return nil
}

// meteredReader counts the bytes read through it.
type meteredReader struct {
	io.Reader
	c prometheus.Counter
}

func (m meteredReader) Read(p []byte) (int, error) {
	k, err := m.Reader.Read(p)
	m.c.Add(float64(k))
	return k, err
}

// meteredFile counts what is read of a model file and can still seek, for
// range requests.
func meteredFile(f io.ReadSeekCloser, c prometheus.Counter) io.ReadCloser {
	return struct {
		io.Reader
		io.Seeker
		io.Closer
	}{meteredReader{f, c}, f, f}
}

// meteredStream counts what is read of a model archive being streamed.
func meteredStream(r io.ReadCloser, c prometheus.Counter) io.ReadCloser {
	return struct {
		io.Reader
		io.Closer
	}{meteredReader{r, c}, r}
}
