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
// those another import also used) and check's error comes first. Memory
// stays at a few chunks, whatever the size of r.
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
			f.stop()
		}
		in.drain()
	}()
	session := s.newImporter(true)
	go func() {
		defer wg.Done()
		in := f.reader(1)
		root, importErr = importFile(in, session)
		if importErr = errors.Join(importErr, session.wait()); importErr != nil {
			f.stop()
		}
		in.drain()
	}()
	f.feed(ctx, r)
	wg.Wait()
	err := errors.Join(checkErr, importErr)
	if checkErr != nil {
		err = checkErr // the import only stopped because of it
	}
	if err == nil {
		err = s.files.Sync()
	}
	s.release(session, err == nil)
	if err != nil {
		return cid.Undef, err
	}
	return root, nil
}

// pendingBlock is a block written by a checked import that has not ended:
// it is removed if every import that used it failed.
type pendingBlock struct {
	users int  // imports in flight that wrote or reused it
	keep  bool // an import that used it succeeded
}

// importer is the DAG service one import writes through. Blocks are
// written by a few goroutines at once, so one block's fsync does not hold
// up hashing the next; wait collects them. A checked import also claims
// each block the store did not already hold, so a failure can remove it.
type importer struct {
	ipld.DAGService // reads, for the DAG builder
	s               *Store
	checked         bool
	claimed         map[cid.Cid]bool // only the import's goroutine touches it

	slots chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	err   error
}

func (s *Store) newImporter(checked bool) *importer {
	return &importer{DAGService: s.local, s: s, checked: checked, claimed: map[cid.Cid]bool{}, slots: make(chan struct{}, 16)}
}

func (t *importer) Add(ctx context.Context, nd ipld.Node) error {
	if t.checked {
		if err := t.claim(nd.Cid()); err != nil {
			return err
		}
	}
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

func (t *importer) claim(c cid.Cid) error {
	if t.claimed[c] {
		return nil
	}
	s := t.s
	s.pendingMu.Lock()
	defer s.pendingMu.Unlock()
	p := s.pending[c]
	if p == nil {
		had, err := s.files.Has(context.Background(), c)
		if err != nil || had {
			return err // kept from before: never this import's to remove
		}
		p = &pendingBlock{}
		s.pending[c] = p
	}
	p.users++
	t.claimed[c] = true
	return nil
}

// release ends a checked import: its blocks are kept if it succeeded, and
// removed if it failed and no other import used them.
func (s *Store) release(t *importer, ok bool) {
	s.pendingMu.Lock()
	defer s.pendingMu.Unlock() // held while removing, so no import claims a block going away
	for c := range t.claimed {
		p := s.pending[c]
		p.users--
		p.keep = p.keep || ok
		if p.users == 0 {
			delete(s.pending, c)
			if !p.keep {
				s.files.DeleteBlock(context.Background(), c)
			}
		}
	}
}

// errStopped is what a consumer reads once the feed was stopped because
// another consumer failed.
var errStopped = errors.New("stopped: the other reader of the upload failed")

// fanout hands the same stream of chunks to several readers, each at its
// own pace, from a fixed pool of buffers: a slow reader holds the feed
// back rather than letting memory grow.
type fanout struct {
	free    chan []byte
	outs    []chan *piece
	stopped chan struct{}
	once    sync.Once
	end     error // why the feed ended (io.EOF when the input ran out); set before outs close
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

func (f *fanout) stop() { f.once.Do(func() { close(f.stopped) }) }

// feed reads r to its end (or until stopped) and closes the readers.
func (f *fanout) feed(ctx context.Context, r io.Reader) {
	f.end = errStopped
	defer func() {
		for _, o := range f.outs {
			close(o)
		}
	}()
	for {
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
