package node

import (
	"crypto/rand"
	"strings"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/trisparc/gaas/protocol"
)

func keyAndID(t *testing.T) (crypto.PrivKey, peer.ID) {
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(k)
	return k, id
}

func sealed(t *testing.T, k crypto.PrivKey, m protocol.Message) []byte {
	env, err := protocol.Seal(k, m)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := protocol.Marshal(env)
	return data
}

func TestRequestValidator(t *testing.T) {
	now := time.Now()
	buyerKey, buyer := keyAndID(t)
	_, other := keyAndID(t)
	topic := protocol.JobTopic("pro")
	req := func(change func(*protocol.JobRequest)) *protocol.JobRequest {
		r := &protocol.JobRequest{JobID: "j-1-r1", Tier: "pro", CapSeconds: 60, Buyer: buyer.String(), IssuedAt: now.UnixMilli()}
		if change != nil {
			change(r)
		}
		return r
	}
	good := sealed(t, buyerKey, req(nil))
	tampered := []byte(strings.Replace(string(good), `"cap_s":60`, `"cap_s":61`, 1))
	for _, tc := range []struct {
		name string
		from peer.ID
		data []byte
		want pubsub.ValidationResult
	}{
		{"a good request", buyer, good, pubsub.ValidationAccept},
		{"malformed", buyer, []byte("{not json"), pubsub.ValidationReject},
		{"tampered after signing", buyer, tampered, pubsub.ValidationReject},
		{"relayed as another peer's own", other, good, pubsub.ValidationReject},
		{"naming another buyer", buyer, sealed(t, buyerKey, req(func(r *protocol.JobRequest) { r.Buyer = other.String() })), pubsub.ValidationReject},
		{"on another tier's topic", buyer, sealed(t, buyerKey, req(func(r *protocol.JobRequest) { r.Tier = "max" })), pubsub.ValidationReject},
		{"not a request", buyer, sealed(t, buyerKey, &protocol.Offer{JobID: "x"}), pubsub.ValidationReject},
		{"stale (a replay)", buyer, sealed(t, buyerKey, req(func(r *protocol.JobRequest) { r.IssuedAt = now.Add(-5 * time.Minute).UnixMilli() })), pubsub.ValidationIgnore},
		{"from the future", buyer, sealed(t, buyerKey, req(func(r *protocol.JobRequest) { r.IssuedAt = now.Add(5 * time.Minute).UnixMilli() })), pubsub.ValidationIgnore},
		{"oversized", buyer, make([]byte, protocol.MaxMessageSize+1), pubsub.ValidationReject},
		{"no cap", buyer, sealed(t, buyerKey, req(func(r *protocol.JobRequest) { r.CapSeconds = 0 })), pubsub.ValidationReject},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := newRequestValidator().check(topic, tc.from, tc.data, now); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	v := newRequestValidator()
	accepted := 0
	for i := 0; i < 100; i++ {
		if v.check(topic, buyer, good, now) == pubsub.ValidationAccept {
			accepted++
		}
	}
	if accepted != requestBurst {
		t.Fatalf("a burst of 100 let %d through, want %d", accepted, requestBurst)
	}
	if v.check(topic, buyer, good, now.Add(time.Second)) != pubsub.ValidationAccept {
		t.Fatal("the buyer was not let through again a second later")
	}
}
