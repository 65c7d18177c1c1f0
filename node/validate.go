package node

import (
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/trisparc/gaas/protocol"
)

// Limits on job requests as they travel over gossipsub.
const (
	requestMaxAge    = 2 * time.Minute // the seen-cache of gossipsub covers the same span, so a replay is dropped either way
	requestMaxSkew   = time.Minute     // from a clock running ahead
	requestRate      = 20              // per second per buyer, with a burst of requestBurst
	requestBurst     = 40
	validatorBuckets = 10000 // buyers tracked at once
)

// requestValidator decides, before gossipsub passes a job request on,
// whether it is a well-formed request signed by the buyer it names, on
// the right topic, fresh, and within its buyer's rate. Rejections count
// against the sending peer's score.
type requestValidator struct {
	mu      sync.Mutex
	buckets map[peer.ID]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newRequestValidator() *requestValidator {
	return &requestValidator{buckets: map[peer.ID]*bucket{}}
}

func (v *requestValidator) check(topic string, from peer.ID, data []byte, now time.Time) pubsub.ValidationResult {
	m, signer, err := protocol.Unmarshal(data)
	if err != nil {
		return pubsub.ValidationReject // malformed, unsigned, forged or oversized
	}
	req, ok := m.(*protocol.JobRequest)
	switch {
	case !ok, signer != from, req.Buyer != signer.String(), protocol.JobTopic(req.Tier) != topic,
		req.JobID == "", len(req.JobID) > 64, req.CapSeconds <= 0, len(req.BuyerAddrs) > 16:
		return pubsub.ValidationReject
	}
	if age := now.Sub(time.UnixMilli(req.IssuedAt)); age > requestMaxAge || age < -requestMaxSkew {
		return pubsub.ValidationIgnore // stale or replayed, or a badly set clock
	}
	if !v.allow(signer, now) {
		return pubsub.ValidationReject // flooding
	}
	return pubsub.ValidationAccept
}

// allow takes a token from the buyer's bucket.
func (v *requestValidator) allow(p peer.ID, now time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	b := v.buckets[p]
	if b == nil {
		if len(v.buckets) >= validatorBuckets {
			for k, old := range v.buckets { // forget buyers long quiet
				if now.Sub(old.last) > time.Minute {
					delete(v.buckets, k)
				}
			}
		}
		b = &bucket{tokens: requestBurst, last: now}
		v.buckets[p] = b
	}
	b.tokens = min(requestBurst, b.tokens+now.Sub(b.last).Seconds()*requestRate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
