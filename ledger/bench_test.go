package ledger

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

const benchWorkers = 64

// parallel runs n calls of f across benchWorkers goroutines and returns
// the calls per second.
func parallel(b *testing.B, n int, f func(i int) error) float64 {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < benchWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkSettlements measures, with durable commits (fsync on) and 64
// concurrent clients: settlements per second (the Settle call of a held,
// started job), whole jobs per second (hold, start and settle), and, in
// the same run, bbolt's own rate of batched one-key writes, with the
// ratio of settlements to raw writes.
func BenchmarkSettlements(b *testing.B) {
	n := max(b.N, 2000)
	dir := b.TempDir()
	l, err := Open(filepath.Join(dir, "ledger.db"), &Options{GroupCommit: true})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	l.Credit("c", Buyer("b"), int64(n)*2000, "")
	job := func(i int) string { return fmt.Sprintf("j%d", i) }
	hold := func(i int) error {
		_, err := l.PlaceHold(Hold{Job: job(i), Buyer: "b", Rate: 5000, CapSeconds: 600, Amount: 833})
		return err
	}
	start := func(i int) error {
		_, err := l.MarkStarted(job(i), "p", time.Now())
		return err
	}
	b.ResetTimer()
	parallel(b, n, hold)
	parallel(b, n, start)
	settles := parallel(b, n, func(i int) error {
		_, err := l.Settle(job(i), 300, 1000, "done")
		return err
	})
	jobs := parallel(b, n, func(i int) error {
		if err := hold(n + i); err != nil {
			return err
		}
		if err := start(n + i); err != nil {
			return err
		}
		_, err := l.Settle(job(n+i), 300, 1000, "done")
		return err
	})
	b.StopTimer()

	raw, err := bolt.Open(filepath.Join(dir, "raw.db"), 0o600, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	raw.MaxBatchDelay = 2 * time.Millisecond
	raw.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("k")); return err })
	rawRate := parallel(b, n, func(i int) error {
		return raw.Batch(func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("k")).Put([]byte(fmt.Sprint(i)), []byte("settled"))
		})
	})
	if r, err := l.Verify(); err != nil || !r.OK() {
		b.Fatalf("%v %v", err, r.Problems)
	}
	b.ReportMetric(settles, "settlements/s")
	b.ReportMetric(jobs, "jobs/s")
	b.ReportMetric(rawRate, "raw-bbolt-writes/s")
	b.ReportMetric(settles/rawRate, "settle/raw")
}
