package blocks

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/ipfs/boxo/blockservice"
	"github.com/ipfs/boxo/blockstore"
	"github.com/ipfs/boxo/ipld/merkledag"
	"github.com/ipfs/go-cid"
	pebbleds "github.com/ipfs/go-ds-pebble"
	ipld "github.com/ipfs/go-ipld-format"
)

func dagOver(bs blockstore.Blockstore) ipld.DAGService {
	return merkledag.NewDAGService(blockservice.New(bs, nil))
}

func blockSet(t *testing.T, s *Store) []string {
	t.Helper()
	keys, err := s.files.AllKeysChan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for c := range keys {
		out = append(out, c.Hash().String())
	}
	sort.Strings(out)
	return out
}

func readAll(t *testing.T, s *Store, c cid.Cid) []byte {
	t.Helper()
	nd, err := s.Node(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	data, err := io.ReadAll(nd.(io.Reader))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func random(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// The check and the import see the same bytes, and the CID is the one a
// plain import gives.
func TestImportCheckedStoresWhatItChecks(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, newHost(t))
	data := random(5<<20 + 12345)
	var seen [32]byte
	c, err := s.ImportChecked(ctx, bytes.NewReader(data), func(r io.Reader) error {
		h := sha256.New()
		io.Copy(h, r)
		copy(seen[:], h.Sum(nil))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != sha256.Sum256(data) {
		t.Fatal("the check saw different bytes")
	}
	if !bytes.Equal(readAll(t, s, c), data) {
		t.Fatal("the stored file differs")
	}
	other := openStore(t, newHost(t))
	plain, err := other.ImportFile(ctx, bytes.NewReader(data))
	if err != nil || plain != c {
		t.Fatalf("plain import %s, checked %s (%v)", plain, c, err)
	}
	if len(s.pending) != 0 {
		t.Fatalf("%d blocks still pending", len(s.pending))
	}
}

// A rejected upload leaves exactly the blocks that were there before,
// including those it shares with earlier files.
func TestImportCheckedRejectedLeavesNothing(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, newHost(t))
	kept := random(2 << 20)
	keptCID, err := s.ImportFile(ctx, bytes.NewReader(kept))
	if err != nil {
		t.Fatal(err)
	}
	before := blockSet(t, s)
	bad := errors.New("line 9 has the wrong number of columns")
	for _, tc := range []struct {
		name  string
		input io.Reader
		check func(io.Reader) error
		want  error
	}{
		{"check fails at the end", bytes.NewReader(append(append([]byte{}, kept...), random(3<<20)...)), func(r io.Reader) error {
			io.Copy(io.Discard, r)
			return bad
		}, bad},
		{"check fails early", bytes.NewReader(random(8 << 20)), func(r io.Reader) error {
			io.CopyN(io.Discard, r, 100)
			return bad
		}, bad},
		{"the upload breaks off", io.MultiReader(bytes.NewReader(random(3<<20)), errReader{io.ErrUnexpectedEOF}), func(r io.Reader) error {
			_, err := io.Copy(io.Discard, r)
			return err
		}, io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.ImportChecked(ctx, tc.input, tc.check)
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if after := blockSet(t, s); !equal(after, before) {
				t.Fatalf("%d blocks before, %d after", len(before), len(after))
			}
		})
	}
	if !bytes.Equal(readAll(t, s, keptCID), kept) {
		t.Fatal("an earlier file was damaged")
	}
}

// Two uploads of the same bytes at once: the one that fails must not take
// blocks away from the one that succeeded.
func TestImportCheckedConcurrentSameContent(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, newHost(t))
	data := random(3<<20 + 5)
	failing := make(chan error, 1)
	release := make(chan struct{})
	read := make(chan struct{})
	go func() {
		_, err := s.ImportChecked(ctx, bytes.NewReader(data), func(r io.Reader) error {
			io.Copy(io.Discard, r)
			close(read)
			<-release // fail only after the other upload has succeeded
			return errors.New("rejected")
		})
		failing <- err
	}()
	<-read
	c, err := s.ImportChecked(ctx, bytes.NewReader(data), func(r io.Reader) error {
		_, err := io.Copy(io.Discard, r)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-failing; err == nil {
		t.Fatal("the rejected upload succeeded")
	}
	if !bytes.Equal(readAll(t, s, c), data) {
		t.Fatal("the successful upload lost blocks to the rejected one")
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A blockstore written by an earlier version (pebble) is moved into files
// at open, with every block, and the pebble files are gone.
func TestOpenMovesPebbleBlockstore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "blocks")
	ds, err := pebbleds.NewDatastore(dir)
	if err != nil {
		t.Fatal(err)
	}
	data := random(2<<20 + 99)
	root, err := importFile(bytes.NewReader(data), dagOver(blockstore.NewBlockstore(ds)))
	if err != nil {
		t.Fatal(err)
	}
	ds.Close()
	// An earlier move that crashed half way is started again.
	os.MkdirAll(dir+".files/zz", 0o700)

	s, err := Open(dir, newHost(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !bytes.Equal(readAll(t, s, root), data) {
		t.Fatal("the moved file differs")
	}
	if isPebble(dir) {
		t.Fatal("pebble's files are still there")
	}
	for _, gone := range []string{dir + ".files", dir + ".pebble-old"} {
		if _, err := os.Stat(gone); !os.IsNotExist(err) {
			t.Fatalf("%s is left over", gone)
		}
	}
}
