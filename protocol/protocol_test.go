package protocol

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

func newKey(t testing.TB) crypto.PrivKey {
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpen(t *testing.T) {
	key := newKey(t)
	id, _ := peer.IDFromPrivateKey(key)
	env, err := Seal(key, &Offer{JobID: "j-1", Tier: TierPro, Provider: id.String(), GPU: "RTX 4070"})
	if err != nil {
		t.Fatal(err)
	}
	m, signer, err := Open(env)
	if err != nil || signer != id {
		t.Fatalf("open: %v, signer %s", err, signer)
	}
	if o, ok := m.(*Offer); !ok || o.JobID != "j-1" || o.GPU != "RTX 4070" {
		t.Fatalf("got %#v", m)
	}

	tampered := env
	tampered.Body = json.RawMessage(strings.Replace(string(env.Body), "RTX 4070", "RTX 4090", 1))
	if _, _, err := Open(tampered); !errors.Is(err, ErrBadSig) {
		t.Fatalf("tampered body: %v", err)
	}
	relabelled := env
	relabelled.Kind = "confirm" // same bytes, another kind: the signature covers the kind
	if _, _, err := Open(relabelled); !errors.Is(err, ErrBadSig) {
		t.Fatalf("relabelled kind: %v", err)
	}
	other, _ := peer.IDFromPrivateKey(newKey(t))
	impostor := env
	impostor.Signer = other.String()
	if _, _, err := Open(impostor); !errors.Is(err, ErrBadSig) {
		t.Fatalf("claimed signer: %v", err)
	}
	future := env
	future.Version = Version + 1
	if _, _, err := Open(future); !errors.Is(err, ErrBadVersion) {
		t.Fatalf("future version: %v", err)
	}
	unknown := env
	unknown.Kind = "gimme_money"
	if _, _, err := Open(unknown); !errors.Is(err, ErrUnknownKind) {
		t.Fatalf("unknown kind: %v", err)
	}
}

// TestConnOverPipe runs the stream framing over an in-memory pipe.
func TestConnOverPipe(t *testing.T) {
	a, b := newKey(t), newKey(t)
	ar, bw := io.Pipe()
	br, aw := io.Pipe()
	ca := NewConn(struct {
		io.Reader
		io.Writer
	}{ar, aw}, a)
	cb := NewConn(struct {
		io.Reader
		io.Writer
	}{br, bw}, b)
	go func() {
		ca.Send(&Log{JobID: "j", Stream: "stdout", Line: "epoch 1"})
		ca.Send(&Finished{JobID: "j", Outcome: OutcomeCompleted, Model: "bafk"})
	}()
	aID, _ := peer.IDFromPrivateKey(a)
	m, signer, _, err := cb.Receive()
	if err != nil || signer != aID || m.(*Log).Line != "epoch 1" {
		t.Fatalf("%v %v %v", m, signer, err)
	}
	m, _, _, err = cb.Receive()
	if err != nil || m.(*Finished).Model != "bafk" {
		t.Fatalf("%v %v", m, err)
	}
}

func TestOversizedFramesAreRefused(t *testing.T) {
	key := newKey(t)
	var buf bytes.Buffer
	c := NewConn(&buf, key)
	if err := c.Send(&Log{Line: strings.Repeat("x", MaxMessageSize)}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("sending: %v", err)
	}
	// A peer that announces a huge frame is refused before we allocate it.
	buf.Reset()
	buf.Write([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	if _, _, _, err := NewConn(&buf, key).Receive(); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("receiving: %v", err)
	}
	if _, _, err := Unmarshal(make([]byte, MaxMessageSize+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("gossip: %v", err)
	}
}

func TestRateCardTierFor(t *testing.T) {
	rc := RateCard{Tiers: []Tier{{Name: "starter", MinVRAMMiB: 7680}, {Name: "pro", MinVRAMMiB: 11776}, {Name: "max", MinVRAMMiB: 19968}}}
	for vram, want := range map[uint64]string{8188: "starter", 12282: "pro", 24564: "max", 16384: "pro", 4096: ""} {
		got, ok := rc.TierFor(vram)
		if got.Name != want || ok != (want != "") {
			t.Errorf("TierFor(%d) = %q, want %q", vram, got.Name, want)
		}
	}
}

func TestTierKeyIsStable(t *testing.T) {
	if TierKey(TierPro).String() != TierKey(TierPro).String() || TierKey(TierPro).Equals(TierKey(TierMax)) {
		t.Fatal("tier keys must be stable and distinct")
	}
}

func FuzzUnmarshal(f *testing.F) {
	key := newKey(f)
	for _, m := range []Message{
		&JobRequest{JobID: "j", Tier: "pro", CapSeconds: 60, Buyer: "x"},
		&Offer{JobID: "j"}, &Finished{Outcome: OutcomeFailed, Reason: "boom"}, &Error{Code: "x", Message: "y"},
	} {
		env, _ := Seal(key, m)
		data, _ := Marshal(env)
		f.Add(data)
	}
	f.Add([]byte(`{"v":1,"kind":"offer","body":{},"signer":"","sig":""}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, signer, err := Unmarshal(data)
		if err != nil {
			return
		}
		if m == nil || signer == "" {
			t.Fatalf("accepted %q without a message or signer", data)
		}
	})
}

// FuzzConnReceive feeds arbitrary bytes to the stream framing.
func FuzzConnReceive(f *testing.F) {
	key := newKey(f)
	var buf bytes.Buffer
	NewConn(&buf, key).Send(&Log{JobID: "j", Line: "epoch 1"})
	f.Add(buf.Bytes())
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{0x02, '{', '}'})
	f.Fuzz(func(t *testing.T, data []byte) {
		c := NewConn(bytes.NewBuffer(data), key)
		for i := 0; i < 4; i++ {
			if _, _, _, err := c.Receive(); err != nil {
				return
			}
		}
	})
}
