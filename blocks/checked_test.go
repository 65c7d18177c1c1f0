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
	"syscall"
	"testing"
	"time"

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

// When the import fails first (here: the blockstore cannot write), its
// error is the answer, not the check's complaint about its cut-off input.
func TestImportCheckedImportFailsFirst(t *testing.T) {
	s := openStore(t, newHost(t))
	tmp := filepath.Join(s.files.dir, "tmp")
	os.RemoveAll(tmp)
	if err := os.WriteFile(tmp, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := s.ImportChecked(context.Background(), bytes.NewReader(random(8<<20)), func(r io.Reader) error {
		_, err := io.Copy(io.Discard, r)
		return err
	})
	if err == nil || errors.Is(err, errStopped) || !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("error %v, want the blockstore's own", err)
	}
}

// A check that stops reading early and says yes does not make a cut-off
// upload look whole.
func TestImportCheckedTruncatedUpload(t *testing.T) {
	s := openStore(t, newHost(t))
	before := blockSet(t, s)
	in := io.MultiReader(bytes.NewReader(random(2<<20)), errReader{io.ErrUnexpectedEOF})
	_, err := s.ImportChecked(context.Background(), in, func(r io.Reader) error {
		_, err := io.CopyN(io.Discard, r, 10)
		return err
	})
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("error %v, want the broken read", err)
	}
	if after := blockSet(t, s); !equal(after, before) {
		t.Fatalf("%d blocks before, %d after", len(before), len(after))
	}
}

// Blocks a failing checked import wrote are kept when something else came
// to rely on them meanwhile: a plain import of the same bytes, or a read
// (as bitswap and a fetch make).
func TestImportCheckedKeepsWhatOthersUse(t *testing.T) {
	ctx := context.Background()
	for _, other := range []string{"plain import", "read"} {
		t.Run(other, func(t *testing.T) {
			s := openStore(t, newHost(t))
			data := random(3<<20 + 7)
			read, release, failed := make(chan struct{}), make(chan struct{}), make(chan error, 1)
			go func() {
				_, err := s.ImportChecked(ctx, bytes.NewReader(data), func(r io.Reader) error {
					io.Copy(io.Discard, r)
					close(read)
					<-release
					return errors.New("rejected")
				})
				failed <- err
			}()
			<-read
			// Wait until the checked import has written its blocks.
			for len(blockSet(t, s)) < 5 { // four leaves and the root
				time.Sleep(time.Millisecond)
			}
			var root cid.Cid
			switch other {
			case "plain import":
				c, err := s.ImportFile(ctx, bytes.NewReader(data))
				if err != nil {
					t.Fatal(err)
				}
				root = c
			case "read":
				keys, _ := s.files.AllKeysChan(ctx)
				for c := range keys {
					if _, err := s.local.Get(ctx, c); err != nil {
						t.Fatal(err)
					}
				}
			}
			kept := blockSet(t, s)
			close(release)
			if err := <-failed; err == nil {
				t.Fatal("the rejected upload succeeded")
			}
			if after := blockSet(t, s); !equal(after, kept) {
				t.Fatalf("%d blocks in use, %d left after the failed import", len(kept), len(after))
			}
			if root.Defined() && !bytes.Equal(readAll(t, s, root), data) {
				t.Fatal("the plain import lost blocks")
			}
		})
	}
}
