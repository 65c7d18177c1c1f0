package blocks

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
)

func newHost(t *testing.T) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func openStore(t *testing.T, h host.Host) *Store {
	t.Helper()
	s, err := Open(t.TempDir(), h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestFetchOverBitswap moves a multi-chunk file and a folder between two
// real hosts on loopback and checks the bytes that arrive.
func TestFetchOverBitswap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ha, hb := newHost(t), newHost(t)
	a, b := openStore(t, ha), openStore(t, hb)
	if err := hb.Connect(ctx, peer.AddrInfo{ID: ha.ID(), Addrs: ha.Addrs()}); err != nil {
		t.Fatal(err)
	}

	data := make([]byte, 3<<20+17) // spans four 1 MiB chunks
	rand.Read(data)
	fileCID, err := a.ImportFile(ctx, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if fileCID.Version() != 1 {
		t.Fatalf("CID %s is not CIDv1", fileCID)
	}
	// Nothing is served that was not granted.
	secret, err := a.ImportFile(ctx, bytes.NewReader([]byte("the buyer's private dataset")))
	if err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 1500*time.Millisecond)
	err = b.Fetch(short, secret)
	cancelShort()
	if err == nil {
		t.Fatal("fetched a block that was never granted")
	}
	if err := a.Grant(ctx, hb.ID(), fileCID); err != nil {
		t.Fatal(err)
	}
	if err := b.Fetch(ctx, fileCID); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "got.bin")
	if err := b.Export(ctx, fileCID, out); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, data) {
		t.Fatal("fetched file differs from the original")
	}

	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "model.json"), []byte(`{"w":[1,2]}`), 0o644)
	os.WriteFile(filepath.Join(dir, "sub", "notes.txt"), []byte("epoch 3"), 0o644)
	dirCID, err := a.ImportPath(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	a.Grant(ctx, hb.ID(), dirCID)
	if err := b.Fetch(ctx, dirCID); err != nil {
		t.Fatal(err)
	}
	outDir := filepath.Join(t.TempDir(), "model")
	if err := b.Export(ctx, dirCID, outDir); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(outDir, "sub", "notes.txt")); string(got) != "epoch 3" {
		t.Fatalf("nested file = %q", got)
	}
}

func TestImportRefusesSymlinks(t *testing.T) {
	s := openStore(t, newHost(t))
	dir := t.TempDir()
	os.Symlink("/etc/passwd", filepath.Join(dir, "stolen"))
	_, err := s.ImportPath(context.Background(), dir)
	if err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("import of a symlink: %v, want a refusal naming the symbolic link", err)
	}
}
