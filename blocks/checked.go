package blocks

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"

	blockformat "github.com/ipfs/go-block-format"
	"github.com/ipfs/go-cid"
	ipld "github.com/ipfs/go-ipld-format"
)

// ImportChecked stores r as a UnixFS file while check reads the same bytes
// alongside it, on another core, in one pass over r. If check or the
// import fails, the blocks this import added are removed again (all but
// those something else also used) and the error of whichever failed first
// is returned. Memory stays at a few chunks, whatever the size of r.
func (s *Store) ImportChecked(ctx context.Context, r io.Reader, check func(io.Reader) error) (cid.Cid, error) {
	f := newFanout(2, 16, 256<<10)
	var checkErr, importErr error
	var root cid.Cid
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		in := f.reader(0)
		if checkErr = check(in); checkErr != nil {
			f.stop(byCheck)
		}
		in.drain()
	}()
	im := s.newImporter()
	go func() {
		defer wg.Done()
		in := f.reader(1)
		root, importErr = importFile(in, im)
		if importErr = errors.Join(importErr, im.wait()); importErr != nil {
			f.stop(byImport)
		}
		in.drain()
	}()
	f.feed(ctx, r)
	wg.Wait()
	var err error
	switch {
	case f.stoppedBy.Load() == byImport:
		err = importErr // the check only failed because its input was cut off
	case checkErr != nil:
		err = checkErr
	case importErr != nil:
		err = importErr
	case f.end != io.EOF:
		// Both took the end of the input for the end of the file; the
		// chunker does so even for a read that broke off.
		err = f.end
	default:
		err = s.files.Sync()
	}
	s.release(im, err == nil)
	if err != nil {
		return cid.Undef, err
	}
	return root, nil
}

// key names a block as the store does: by its multihash alone, so a raw
// and a dag-pb CID of the same bytes are one block.
func key(c cid.Cid) string { return string(c.Hash()) }

// pendingBlock is a block written by an import that has not ended: it is
// removed if every import that used it failed and nothing else used it.
type pendingBlock struct {
	users int  // imports in flight that wrote or reused it
	keep  bool // an import that used it succeeded, or something else used it
}

// importer is the DAG service one import writes through. Blocks are
// written by a few goroutines at once, so one block's fsync does not hold
// up hashing the next; wait collects them. Each block the store did not
// hold already is claimed, so that a failure can remove it.
type importer struct {
	ipld.DAGService // reads, for the DAG builder
	s               *Store
	claimed         map[cid.Cid]bool // only the import's goroutine touches it

	slots chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	err   error
}

func (s *Store) newImporter() *importer {
	return &importer{DAGService: s.raw, s: s, claimed: map[cid.Cid]bool{}, slots: make(chan struct{}, 16)}
}

func (t *importer) Add(ctx context.Context, nd ipld.Node) error {
	if t.claimed[nd.Cid()] {
		return nil // a repeated chunk: written once
	}
	if !t.s.claim(nd.Cid()) {
		return nil // held before this import began: nothing to write
	}
	t.claimed[nd.Cid()] = true
	t.mu.Lock()
	failed := t.err
	t.mu.Unlock()
	if failed != nil {
		return failed
	}
	// A ProtoNode encodes itself lazily: take its bytes here, not in
	// the writer.
	b, err := blockformat.NewBlockWithCid(nd.RawData(), nd.Cid())
	if err != nil {
		return err
	}
	t.slots <- struct{}{}
	t.wg.Add(1)
	go func() {
		defer func() { <-t.slots; t.wg.Done() }()
		if err := t.s.files.Put(ctx, b); err != nil {
			t.mu.Lock()
			t.err = errors.Join(t.err, err)
			t.mu.Unlock()
		}
	}()
	return nil
}

func (t *importer) AddMany(ctx context.Context, nds []ipld.Node) error {
	for _, nd := range nds {
		if err := t.Add(ctx, nd); err != nil {
			return err
		}
	}
	return nil
}

// wait returns once every block is written, with the first failure.
func (t *importer) wait() error {
	t.wg.Wait()
	return t.err
}

// claim notes that an import uses block c, unless c was stored before
// any import in flight wrote it (then it is no import's to remove, and
// claim reports false).
func (s *Store) claim(c cid.Cid) bool {
	s.pendingMu.Lock()
	defer s.pendingMu.Unlock()
	p := s.pending[key(c)]
	if p == nil {
		if had, _ := s.files.Has(context.Background(), c); had {
			return false
		}
		p = &pendingBlock{}
		s.pending[key(c)] = p
	}
	p.users++
	return true
}

// release ends an import: its blocks are kept if it succeeded, and
// removed if it failed and nothing else used them.
func (s *Store) release(t *importer, ok bool) {
	s.pendingMu.Lock()
	defer s.pendingMu.Unlock() // held while removing, so no one claims a block going away
	for c := range t.claimed {
		p := s.pending[key(c)]
		p.users--
		p.keep = p.keep || ok
		if p.users == 0 {
			delete(s.pending, key(c))
			if !p.keep {
				s.files.DeleteBlock(context.Background(), c)
			}
		}
	}
}

// keepPending marks c kept if an import in flight wrote it: something
// else now relies on it. The caller holds pendingMu.
func (s *Store) keepPending(c cid.Cid) {
	if p := s.pending[key(c)]; p != nil {
		p.keep = true
	}
}

// guarded is the blockstore as bitswap and the node's reads and plain
// writes see it. Finding a block an import in flight wrote keeps it, and
// the look is made under pendingMu, so a block found is never removed
// afterwards by that import's failure.
type guarded struct{ s *Store }

func (g guarded) Has(ctx context.Context, c cid.Cid) (bool, error) {
	g.s.pendingMu.Lock()
	defer g.s.pendingMu.Unlock()
	g.s.keepPending(c)
	return g.s.files.Has(ctx, c)
}

// present is Has as an error: ipld.ErrNotFound when the block is missing.
func (g guarded) present(ctx context.Context, c cid.Cid) error {
	has, err := g.Has(ctx, c)
	if err == nil && !has {
		err = ipld.ErrNotFound{Cid: c}
	}
	return err
}

func (g guarded) Get(ctx context.Context, c cid.Cid) (blockformat.Block, error) {
	if err := g.present(ctx, c); err != nil {
		return nil, err
	}
	return g.s.files.Get(ctx, c)
}

func (g guarded) GetSize(ctx context.Context, c cid.Cid) (int, error) {
	if err := g.present(ctx, c); err != nil {
		return -1, err
	}
	return g.s.files.GetSize(ctx, c)
}

// Put writes a block for good: if an import in flight wrote it too, it
// is kept whatever becomes of that import.
func (g guarded) Put(ctx context.Context, b blockformat.Block) error {
	s, c := g.s, b.Cid()
	s.pendingMu.Lock()
	p := s.pending[key(c)]
	if p == nil {
		if had, _ := s.files.Has(ctx, c); had {
			s.pendingMu.Unlock()
			return nil
		}
		p = &pendingBlock{}
		s.pending[key(c)] = p
	}
	p.users++
	p.keep = true
	s.pendingMu.Unlock()
	err := s.files.Put(ctx, b)
	s.pendingMu.Lock()
	if p.users--; p.users == 0 {
		delete(s.pending, key(c))
	}
	s.pendingMu.Unlock()
	return err
}

func (g guarded) PutMany(ctx context.Context, bs []blockformat.Block) error {
	for _, b := range bs {
		if err := g.Put(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

func (g guarded) DeleteBlock(ctx context.Context, c cid.Cid) error {
	return g.s.files.DeleteBlock(ctx, c)
}

func (g guarded) AllKeysChan(ctx context.Context) (<-chan cid.Cid, error) {
	return g.s.files.AllKeysChan(ctx)
}

// errStopped is what a reader gets once the feed was stopped because
// another reader failed.
var errStopped = errors.New("stopped: the other reader of the upload failed")

// The readers of a checked import, to say which stopped the feed.
const (
	byCheck  = 1
	byImport = 2
)

// fanout hands the same stream of chunks to several readers, each at its
// own pace, from a fixed pool of buffers: a slow reader holds the feed
// back rather than letting memory grow.
type fanout struct {
	free      chan []byte
	outs      []chan *piece
	stopped   chan struct{}
	stoppedBy atomic.Int32 // the first reader to stop the feed
	end       error        // why the feed ended (io.EOF when the input ran out); set before outs close
}

type piece struct {
	data []byte
	buf  []byte
	refs atomic.Int32
}

func newFanout(readers, buffers, size int) *fanout {
	f := &fanout{free: make(chan []byte, buffers), stopped: make(chan struct{})}
	for range buffers {
		f.free <- make([]byte, size)
	}
	for range readers {
		f.outs = append(f.outs, make(chan *piece, buffers)) // room for every buffer: sends never block
	}
	return f
}

// stop ends the feed; the first caller is remembered.
func (f *fanout) stop(who int32) {
	if f.stoppedBy.CompareAndSwap(0, who) {
		close(f.stopped)
	}
}

// feed reads r to its end (or until stopped) and closes the readers.
func (f *fanout) feed(ctx context.Context, r io.Reader) {
	f.end = errStopped
	defer func() {
		for _, o := range f.outs {
			close(o)
		}
	}()
	for {
		select { // a stop wins over a free buffer
		case <-f.stopped:
			return
		default:
		}
		var buf []byte
		select {
		case buf = <-f.free:
		case <-f.stopped:
			return
		case <-ctx.Done():
			f.end = ctx.Err()
			return
		}
		n, err := fill(r, buf)
		if n > 0 {
			p := &piece{data: buf[:n], buf: buf}
			p.refs.Store(int32(len(f.outs)))
			for _, o := range f.outs {
				o <- p
			}
		} else {
			f.free <- buf
		}
		if err != nil {
			f.end = err
			return
		}
	}
}

// fill reads until buf is full or r ends (io.EOF) or fails: unlike
// io.ReadFull it keeps a clean end apart from an error r returned.
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		k, err := r.Read(buf[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (f *fanout) done(p *piece) {
	if p.refs.Add(-1) == 0 {
		f.free <- p.buf
	}
}

func (f *fanout) reader(i int) *fanReader { return &fanReader{f: f, in: f.outs[i]} }

// fanReader is one reader's view of the feed.
type fanReader struct {
	f   *fanout
	in  chan *piece
	cur *piece
	off int
}

func (r *fanReader) Read(p []byte) (int, error) {
	for r.cur == nil {
		next, ok := <-r.in
		if !ok {
			return 0, r.f.end
		}
		r.cur, r.off = next, 0
	}
	n := copy(p, r.cur.data[r.off:])
	if r.off += n; r.off == len(r.cur.data) {
		r.f.done(r.cur)
		r.cur = nil
	}
	return n, nil
}

// drain gives back every chunk this reader has not read, so the feed
// never waits on a reader that has finished.
func (r *fanReader) drain() {
	if r.cur != nil {
		r.f.done(r.cur)
		r.cur = nil
	}
	for p := range r.in {
		r.f.done(p)
	}
}
