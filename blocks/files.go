package blocks

import (
	"context"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	blockformat "github.com/ipfs/go-block-format"
	"github.com/ipfs/go-cid"
	ipld "github.com/ipfs/go-ipld-format"
	mh "github.com/multiformats/go-multihash"
)

// fileStore keeps each block in a file of its own, named by its multihash
// and spread over 256 folders by the hash's last byte, as kubo's flatfs
// does. Blocks are up to a MiB of hashed content written once and read
// whole: an LSM tree (pebble) rewrites them on every compaction, a folder
// of files writes them once.
//
// A block is written to tmp/, synced, then renamed into place, so a crash
// leaves a whole block or none; tmp/ is emptied at open.
type fileStore struct {
	dir string

	mu    sync.Mutex
	dirty map[string]bool // shard folders with renames not yet synced
}

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// openFileStore opens dir, making its 256 shard folders (and syncing dir,
// so they last) the first time.
func openFileStore(dir string) (*fileStore, error) {
	if err := os.RemoveAll(filepath.Join(dir, "tmp")); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o700); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "ff")); err == nil {
		return &fileStore{dir: dir, dirty: map[string]bool{}}, nil // made in order: the last means all
	}
	made := false
	for i := range 256 {
		err := os.Mkdir(filepath.Join(dir, fmt.Sprintf("%02x", i)), 0o700)
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		made = made || err == nil
	}
	if made {
		if err := syncDir(dir); err != nil {
			return nil, err
		}
	}
	return &fileStore{dir: dir, dirty: map[string]bool{}}, nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// path is where a block lives: DIR/ab/CIQ….
func (s *fileStore) path(c cid.Cid) string {
	h := c.Hash()
	return filepath.Join(s.dir, hex.EncodeToString(h[len(h)-1:]), b32.EncodeToString(h))
}

func (s *fileStore) Has(_ context.Context, c cid.Cid) (bool, error) {
	_, err := os.Stat(s.path(c))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

func (s *fileStore) Get(_ context.Context, c cid.Cid) (blockformat.Block, error) {
	data, err := os.ReadFile(s.path(c))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ipld.ErrNotFound{Cid: c}
	}
	if err != nil {
		return nil, err
	}
	return blockformat.NewBlockWithCid(data, c)
}

func (s *fileStore) GetSize(_ context.Context, c cid.Cid) (int, error) {
	fi, err := os.Stat(s.path(c))
	if errors.Is(err, fs.ErrNotExist) {
		return -1, ipld.ErrNotFound{Cid: c}
	}
	if err != nil {
		return -1, err
	}
	return int(fi.Size()), nil
}

func (s *fileStore) Put(_ context.Context, b blockformat.Block) error {
	dst := s.path(b.Cid())
	// Marked before the rename (and when the block is already there: its
	// writer may not have synced the folder yet), so a Sync after this
	// Put covers the block's name.
	s.mu.Lock()
	s.dirty[filepath.Dir(dst)] = true
	s.mu.Unlock()
	if _, err := os.Stat(dst); err == nil {
		return nil // content-addressed: the same name holds the same bytes
	}
	tmp, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "put-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b.RawData())
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing block %s: %w", b.Cid(), err)
	}
	return nil
}

func (s *fileStore) PutMany(ctx context.Context, bs []blockformat.Block) error {
	for _, b := range bs {
		if err := s.Put(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

func (s *fileStore) DeleteBlock(_ context.Context, c cid.Cid) error {
	err := os.Remove(s.path(c))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// Sync makes the names of the blocks written so far durable: each block's
// bytes were synced before its rename, this syncs the renames.
func (s *fileStore) Sync() error {
	s.mu.Lock()
	dirs := s.dirty
	s.dirty = map[string]bool{}
	s.mu.Unlock()
	var errs []error
	for d := range dirs {
		if err := syncDir(d); err != nil {
			errs = append(errs, err)
			s.mu.Lock()
			s.dirty[d] = true // still owed: the next Sync tries again
			s.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

// AllKeysChan lists every block, as raw-codec CIDs (the store keeps
// multihashes only).
func (s *fileStore) AllKeysChan(ctx context.Context) (<-chan cid.Cid, error) {
	shards, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	out := make(chan cid.Cid)
	go func() {
		defer close(out)
		for _, shard := range shards {
			if !shard.IsDir() || len(shard.Name()) != 2 {
				continue
			}
			names, _ := os.ReadDir(filepath.Join(s.dir, shard.Name()))
			for _, n := range names {
				raw, err := b32.DecodeString(n.Name())
				if err != nil {
					continue
				}
				h, err := mh.Cast(raw)
				if err != nil {
					continue
				}
				select {
				case out <- cid.NewCidV1(cid.Raw, h):
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}

// isPebble says whether dir holds a blockstore from before the move to
// files: pebble keeps its manifests there.
func isPebble(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "MANIFEST-*"))
	return len(m) > 0
}
