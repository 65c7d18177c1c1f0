package node

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trisparc/gaas/api"
	"github.com/trisparc/gaas/internal/testcsv"
)

// BenchmarkUploadDataset uploads a large CSV through a real node's API
// (checked and stored as blocks in one pass) and reports its throughput
// beside, in the same run, three plain baselines: reading the file,
// uploading it over HTTP to a handler that discards it, and uploading it
// to a handler that saves it to one file on the node's disk and syncs it
// (the least any upload that keeps the file must do); and the most heap
// the process held meanwhile. GAAS_BENCH_CSV_MB sets the size (default
// 256; the figure is 1024).
func BenchmarkUploadDataset(b *testing.B) {
	path, written := testcsv.ForBenchmark(b)
	size := float64(written) / 1e6

	n, _ := startBuyer(b)
	c := api.NewClient(n.APIURL(), n.Token())
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	defer sink.Close()
	saver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := os.CreateTemp(n.cfg.DataDir, "plain-*.csv")
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		defer os.Remove(f.Name())
		defer f.Close()
		if _, err := io.Copy(f, r.Body); err != nil || f.Sync() != nil {
			http.Error(w, "saving failed", 500)
		}
	}))
	defer saver.Close()
	post := func(url string) time.Duration {
		f, _ := os.Open(path)
		defer f.Close()
		start := time.Now()
		resp, err := http.Post(url, "text/csv", f)
		if err != nil || resp.StatusCode != 200 {
			b.Fatal(err, resp.Status)
		}
		resp.Body.Close()
		return time.Since(start)
	}

	var peak atomic.Uint64
	stop := make(chan struct{})
	go func() {
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
		}
	}()
	var read, plainHTTP, plainSave, upload time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f, _ := os.Open(path)
		start := time.Now()
		io.Copy(io.Discard, f)
		read += time.Since(start)
		f.Close()

		plainHTTP += post(sink.URL)
		plainSave += post(saver.URL)

		runtime.GC()
		peak.Store(0)
		f, _ = os.Open(path)
		start = time.Now()
		ds, err := c.UploadDataset(context.Background(), "big.csv", f)
		upload += time.Since(start)
		f.Close()
		if err != nil || ds.Columns != testcsv.Columns {
			b.Fatalf("%+v %v", ds, err)
		}
	}
	b.StopTimer()
	close(stop)
	rate := func(d time.Duration) float64 { return size / (d.Seconds() / float64(b.N)) }
	b.ReportMetric(rate(read), "plain-read-MB/s")
	b.ReportMetric(rate(plainHTTP), "plain-upload-MB/s")
	b.ReportMetric(rate(plainSave), "plain-save-MB/s")
	b.ReportMetric(rate(upload), "upload-and-check-MB/s")
	b.ReportMetric(read.Seconds()/upload.Seconds(), "vs-plain-read")
	b.ReportMetric(plainHTTP.Seconds()/upload.Seconds(), "vs-plain-upload")
	b.ReportMetric(plainSave.Seconds()/upload.Seconds(), "vs-plain-save")
	b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MiB")
}
