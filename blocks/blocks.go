// Package blocks keeps a peer's content-addressed blocks (datasets,
// scripts, models) as files, one a block (kubo's flatfs layout; flatfs
// itself has no release that builds against the current go-datastore),
// moves them over bitswap, and converts files and folders to and from
// UnixFS DAGs (CIDv1, raw leaves, 1 MiB chunks).
package blocks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/ipfs/boxo/bitswap"
	"github.com/ipfs/boxo/bitswap/network/bsnet"
	"github.com/ipfs/boxo/blockservice"
	"github.com/ipfs/boxo/blockstore"
	chunk "github.com/ipfs/boxo/chunker"
	"github.com/ipfs/boxo/files"
	"github.com/ipfs/boxo/ipld/merkledag"
	unixfile "github.com/ipfs/boxo/ipld/unixfs/file"
	"github.com/ipfs/boxo/ipld/unixfs/importer/balanced"
	"github.com/ipfs/boxo/ipld/unixfs/importer/helpers"
	uio "github.com/ipfs/boxo/ipld/unixfs/io"
	"github.com/ipfs/go-cid"
	pebbleds "github.com/ipfs/go-ds-pebble"
	ipld "github.com/ipfs/go-ipld-format"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
)

var profile = uio.UnixFS_v1_2025

// Store is a peer's blockstore with bitswap in front of it. Bitswap
// serves a block only to a peer it was granted to: a buyer's dataset goes
// to the provider running its job and to nobody else.
type Store struct {
	files *fileStore
	swap  *bitswap.Bitswap
	dag   ipld.DAGService
	local ipld.DAGService // never asks the network
	raw   ipld.DAGService // local, and does not keep pending blocks: for importers' own reads

	mu     sync.Mutex
	grants map[peer.ID]map[cid.Cid]int // block → how many grants cover it

	pendingMu sync.Mutex
	pending   map[string]*pendingBlock // by multihash: written by imports in flight
}

// Open opens (or creates) the blockstore in dir and starts bitswap on h.
// A blockstore kept by an earlier version in pebble is moved into files
// first.
func Open(dir string, h host.Host) (*Store, error) {
	if err := migrate(dir); err != nil {
		return nil, fmt.Errorf("moving the blockstore %s out of pebble: %w", dir, err)
	}
	files, err := openFileStore(dir)
	if err != nil {
		return nil, fmt.Errorf("opening blockstore %s: %w", dir, err)
	}
	s := &Store{files: files, grants: map[peer.ID]map[cid.Cid]int{}, pending: map[string]*pendingBlock{}}
	// Everything but an import's own writes goes through guarded, so that
	// a block an import in flight wrote is kept once anything else uses it.
	bs := guarded{s}
	s.swap = bitswap.New(context.Background(), bsnet.NewFromIpfsHost(h), nil, bs,
		bitswap.WithPeerBlockRequestFilter(s.granted))
	s.dag = merkledag.NewDAGService(blockservice.New(bs, s.swap))
	s.local = merkledag.NewDAGService(blockservice.New(bs, nil))
	s.raw = merkledag.NewDAGService(blockservice.New(files, nil))
	return s, nil
}

// migrate moves a pebble blockstore in dir into files: it copies every
// block into dir.files, then swaps the folders. A crash or failure at any
// point leaves the old store whole; a later start goes on copying (blocks
// are written whole or not at all, so those copied stay).
func migrate(dir string) error {
	next, old := dir+".files", dir+".pebble-old"
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(next); err == nil { // crashed between the renames
			if err := os.Rename(next, dir); err != nil {
				return err
			}
		}
	}
	if !isPebble(dir) {
		os.RemoveAll(old) // leftovers of a finished move; harmless if they stay
		return nil
	}
	files, err := openFileStore(next)
	if err != nil {
		return err
	}
	ds, err := pebbleds.NewDatastore(dir)
	if err != nil {
		return err
	}
	ctx := context.Background()
	bs := blockstore.NewBlockstore(ds)
	lister, ok := bs.(blockstore.AllKeysChanWithErrer)
	if !ok {
		ds.Close()
		return errors.New("this boxo's blockstore cannot say whether a listing was complete")
	}
	keys, listErr, err := lister.AllKeysChanWithErr(ctx)
	if err != nil {
		ds.Close()
		return err
	}
	var copyErr error
	for c := range keys {
		if copyErr != nil {
			continue // drain, so the lister ends
		}
		b, err := bs.Get(ctx, c)
		if err == nil {
			err = files.Put(ctx, b)
		}
		copyErr = err
	}
	// A listing cut short must not be taken for the whole store.
	if err := errors.Join(copyErr, listErr(), files.Sync(), ds.Close()); err != nil {
		return err
	}
	if err := os.Rename(dir, old); err != nil {
		return err
	}
	if err := os.Rename(next, dir); err != nil {
		return err
	}
	if err := syncDir(filepath.Dir(dir)); err != nil {
		return err
	}
	os.RemoveAll(old)
	return nil
}

func (s *Store) granted(p peer.ID, c cid.Cid) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grants[p][c] > 0
}

// Grant lets peer p fetch every block of the local DAGs under roots, until
// Revoke.
func (s *Store) Grant(ctx context.Context, p peer.ID, roots ...cid.Cid) error {
	return s.changeGrant(ctx, p, roots, 1)
}

// Revoke undoes a Grant.
func (s *Store) Revoke(ctx context.Context, p peer.ID, roots ...cid.Cid) error {
	return s.changeGrant(ctx, p, roots, -1)
}

func (s *Store) changeGrant(ctx context.Context, p peer.ID, roots []cid.Cid, delta int) error {
	var all []cid.Cid
	for _, root := range roots {
		err := merkledag.Walk(ctx, merkledag.GetLinksWithDAG(s.local), root, func(c cid.Cid) bool {
			all = append(all, c)
			return true
		})
		if err != nil {
			return fmt.Errorf("listing the blocks of %s: %w", root, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.grants[p] == nil {
		s.grants[p] = map[cid.Cid]int{}
	}
	for _, c := range all {
		if s.grants[p][c] += delta; s.grants[p][c] <= 0 {
			delete(s.grants[p], c)
		}
	}
	if len(s.grants[p]) == 0 {
		delete(s.grants, p)
	}
	return nil
}

// Transferred is how many bytes of blocks bitswap has received and sent.
func (s *Store) Transferred() (received, sent uint64) {
	st, err := s.swap.Stat()
	if err != nil || st == nil {
		return 0, 0
	}
	return st.DataReceived, st.DataSent
}

// Close stops bitswap and closes the blockstore.
func (s *Store) Close() error {
	return s.swap.Close()
}

// ImportFile adds the bytes of r as a UnixFS file and returns its root.
func (s *Store) ImportFile(ctx context.Context, r io.Reader) (cid.Cid, error) {
	im := s.newImporter()
	c, err := importFile(r, im)
	if err = errors.Join(err, im.wait()); err == nil {
		err = s.files.Sync()
	}
	s.release(im, err == nil) // a failed import leaves no blocks of its own behind
	if err != nil {
		return cid.Undef, err
	}
	return c, nil
}

func importFile(r io.Reader, dag ipld.DAGService) (cid.Cid, error) {
	params := helpers.DagBuilderParams{
		Maxlinks:   profile.FileDAGWidth,
		RawLeaves:  profile.RawLeaves,
		CidBuilder: profile.CidBuilder(),
		Dagserv:    dag,
	}
	db, err := params.New(chunk.NewSizeSplitter(r, profile.ChunkSize))
	if err != nil {
		return cid.Undef, err
	}
	nd, err := balanced.Layout(db)
	if err != nil {
		return cid.Undef, fmt.Errorf("importing file: %w", err)
	}
	return nd.Cid(), nil
}

// ImportPath adds a file or a folder tree. Symlinks and anything that is
// not a regular file or folder are refused: a job's output must never
// carry a link out of its folder.
func (s *Store) ImportPath(ctx context.Context, path string) (cid.Cid, error) {
	nd, err := s.importPath(ctx, path)
	if err != nil {
		return cid.Undef, err
	}
	return nd.Cid(), s.files.Sync()
}

func (s *Store) importPath(ctx context.Context, path string) (ipld.Node, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	switch {
	case fi.Mode().IsRegular():
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		c, err := importFile(f, s.local)
		if err != nil {
			return nil, err
		}
		return s.local.Get(ctx, c)
	case fi.IsDir():
		dir, err := uio.NewDirectory(s.local, uio.WithCidBuilder(profile.CidBuilder()))
		if err != nil {
			return nil, err
		}
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			child, err := s.importPath(ctx, filepath.Join(path, e.Name()))
			if err != nil {
				return nil, err
			}
			if err := dir.AddChild(ctx, e.Name(), child); err != nil {
				return nil, err
			}
		}
		nd, err := dir.GetNode()
		if err != nil {
			return nil, err
		}
		return nd, s.local.Add(ctx, nd)
	default:
		return nil, fmt.Errorf("%s is a %s, not a file or folder: refused", path, describeMode(fi.Mode()))
	}
}

func describeMode(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// Fetch gets every block of the DAG under root, from peers over bitswap
// where it is not already local. Bitswap checks each block against its
// hash, so a fetched DAG is exactly the one root names.
func (s *Store) Fetch(ctx context.Context, root cid.Cid) error {
	if err := merkledag.FetchGraph(ctx, root, s.dag); err != nil {
		return fmt.Errorf("fetching %s: %w", root, err)
	}
	return s.files.Sync()
}

// Node opens a local UnixFS file or folder.
func (s *Store) Node(ctx context.Context, root cid.Cid) (files.Node, error) {
	nd, err := s.local.Get(ctx, root)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", root, err)
	}
	return unixfile.NewUnixfsFile(ctx, s.local, nd)
}

// Export writes a local DAG to path (a file, or a folder tree).
func (s *Store) Export(ctx context.Context, root cid.Cid, path string) error {
	n, err := s.Node(ctx, root)
	if err != nil {
		return err
	}
	defer n.Close()
	if err := files.WriteTo(n, path); err != nil {
		return fmt.Errorf("writing %s to %s: %w", root, path, err)
	}
	return nil
}
