package monitor

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cosmicac/cosmicac/internal/joblog"
)

// The spool keeps every record bound for Loki on disk from the moment the
// monitor acknowledges it until Loki has taken it. It is a directory of
// append-only segment files, NNNNNNNNNNNNNNNNNNNN.seg (the segment's number),
// each a run of frames:
//
//	uint32 big-endian length of payload | uint32 CRC-32C of payload | payload
//	payload = uint64 big-endian sequence number | the record as JSON
//
// and a file "cursor" ("SEGMENT OFFSET"), the first frame not yet in Loki.
// It is bounded in bytes, and each job to a share of that bound (counted
// in memory for the records appended since open).
// Appends are group-committed: writers append under the monitor's lock and
// then wait in sync, where one fsync covers every write made before it. A
// torn frame at the end of the last segment (a crash mid-write, never
// acknowledged) is cut off on open. Segments wholly before the cursor are
// deleted. The cursor is written (rename, no fsync) after each push: after
// a crash a batch may be pushed twice, which Loki ignores (it drops an
// entry identical in timestamp and line to one it has in the stream).

var errSpoolFull = errors.New("loki spool full: Loki is not taking records fast enough")

var errClosed = errors.New("monitor closed")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const frameHeader = 8

type spoolPos struct {
	seg uint64
	off int64
}

type spool struct {
	dir      string
	maxBytes int64
	jobShare int64 // of maxBytes, for one job
	segBytes int64
	maxSeq   uint64 // the highest number found on open

	mu     sync.Mutex // guards the fields below
	segs   []uint64   // live segments, ascending; the last is being written
	sizes  map[uint64]int64
	f      *os.File // the last segment
	gen    uint64   // writes made
	cursor spoolPos // first frame not yet in Loki
	notify chan struct{}
	// jobs: each job's bytes not yet in Loki, of the records appended
	// since open (numbered above maxSeq); those replayed on open count
	// towards maxBytes only.
	jobs map[string]int64

	syncMu sync.Mutex // one fsync at a time
	synced uint64     // gen covered by the last fsync

	rd    *os.File // the reader's open segment
	rdSeg uint64
	rdBuf *bufio.Reader
	rdOff int64
}

func segName(dir string, n uint64) string {
	return filepath.Join(dir, fmt.Sprintf("%020d.seg", n))
}

func openSpool(dir string, maxBytes, jobShare, segBytes int64) (*spool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create spool dir: %w", err)
	}
	s := &spool{dir: dir, maxBytes: maxBytes, jobShare: jobShare, segBytes: segBytes, sizes: map[uint64]int64{},
		notify: make(chan struct{}, 1), jobs: map[string]int64{}}
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read spool dir: %w", err)
	}
	for _, de := range des {
		name, ok := strings.CutSuffix(de.Name(), ".seg")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(name, 10, 64)
		if err != nil {
			continue
		}
		s.segs = append(s.segs, n)
	}
	slices.Sort(s.segs)
	if b, err := os.ReadFile(filepath.Join(dir, "cursor")); err == nil {
		if _, err := fmt.Sscanf(string(b), "%d %d", &s.cursor.seg, &s.cursor.off); err != nil {
			return nil, fmt.Errorf("read spool cursor: %w", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read spool cursor: %w", err)
	}
	// Drop segments before the cursor; check every frame of the rest,
	// cutting a torn tail, and find the highest number.
	var live []uint64
	for i, n := range s.segs {
		if n < s.cursor.seg {
			os.Remove(segName(dir, n))
			continue
		}
		size, maxSeq, err := scanSegment(segName(dir, n), i == len(s.segs)-1)
		if err != nil {
			return nil, err
		}
		s.sizes[n] = size
		s.maxSeq = max(s.maxSeq, maxSeq)
		live = append(live, n)
	}
	s.segs = live
	if len(s.segs) == 0 {
		s.segs = []uint64{s.cursor.seg}
		s.sizes[s.cursor.seg] = 0
	}
	if s.cursor.seg < s.segs[0] {
		s.cursor = spoolPos{seg: s.segs[0]}
	}
	last := s.segs[len(s.segs)-1]
	if s.f, err = os.OpenFile(segName(dir, last), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); err != nil {
		return nil, fmt.Errorf("open spool segment: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return nil, err
	}
	return s, nil
}

// scanSegment checks a segment's frames, returning its valid size and the
// highest number in it. With tail, a torn last frame is cut off; elsewhere
// a bad frame is an error.
func scanSegment(name string, tail bool) (int64, uint64, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, 0, fmt.Errorf("open spool segment: %w", err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<16)
	var off int64
	var maxSeq uint64
	var buf []byte
	for {
		p, err := readFrame(br, &buf)
		if err == io.EOF {
			return off, maxSeq, nil
		}
		if err != nil {
			if !tail {
				return 0, 0, fmt.Errorf("spool segment %s at %d: %w", name, off, err)
			}
			if err := os.Truncate(name, off); err != nil {
				return 0, 0, fmt.Errorf("cut torn spool tail: %w", err)
			}
			return off, maxSeq, nil
		}
		maxSeq = max(maxSeq, binary.BigEndian.Uint64(p))
		off += int64(frameHeader + len(p))
	}
}

var errTorn = errors.New("torn or corrupt frame")

// readFrame reads one frame's payload into *buf.
func readFrame(r io.Reader, buf *[]byte) ([]byte, error) {
	var h [frameHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if err == io.EOF {
			return nil, io.EOF
		}
		return nil, errTorn
	}
	n := binary.BigEndian.Uint32(h[:4])
	if n < 8 || n > 64<<20 {
		return nil, errTorn
	}
	if cap(*buf) < int(n) {
		*buf = make([]byte, n)
	}
	p := (*buf)[:n]
	if _, err := io.ReadFull(r, p); err != nil {
		return nil, errTorn
	}
	if crc32.Checksum(p, castagnoli) != binary.BigEndian.Uint32(h[4:]) {
		return nil, errTorn
	}
	return p, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync spool dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync spool dir: %w", err)
	}
	return nil
}

// size is the spool's bytes not yet in Loki.
func (s *spool) size() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sizeLocked()
}

func (s *spool) sizeLocked() int64 {
	var n int64
	for _, seg := range s.segs {
		n += s.sizes[seg]
	}
	return n - s.cursor.off
}

// frameSize is the bytes a record of JSON body takes in the spool.
func frameSize(body []byte) int64 { return int64(frameHeader + 8 + len(body)) }

// overShare says, for each of recs (bodies: their JSON) about to be
// appended in order, whether it would take its job past its share; once a
// job's record is over, so are its next ones. The caller orders appends.
func (s *spool) overShare(recs []joblog.Record, bodies [][]byte) []bool {
	over := make([]bool, len(recs))
	batch := map[string]int64{} // bytes of the batch's records so far, by job; -1: over
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, r := range recs {
		b := batch[r.JobID]
		if b < 0 || s.jobs[r.JobID]+b+frameSize(bodies[i]) > s.jobShare {
			over[i], batch[r.JobID] = true, -1
			continue
		}
		batch[r.JobID] = b + frameSize(bodies[i])
	}
	return over
}

// release records that jobs' bytes (of records numbered above maxSeq) are
// in Loki.
func (s *spool) release(jobs map[string]int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, n := range jobs {
		if s.jobs[id] -= n; s.jobs[id] <= 0 {
			delete(s.jobs, id)
		}
	}
}

// append writes es (bodies: their records' JSON) and returns the write's
// generation for sync. The caller orders appends.
func (s *spool) append(es []*entry, bodies [][]byte) (uint64, error) {
	var total int
	for _, b := range bodies {
		total += int(frameSize(b))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return 0, errClosed
	}
	if s.sizeLocked()+int64(total) > s.maxBytes {
		return 0, errSpoolFull
	}
	last := s.segs[len(s.segs)-1]
	if s.sizes[last] > 0 && s.sizes[last]+int64(total) > s.segBytes {
		// Close this segment (synced, so that every earlier write is
		// durable before the new file takes the next ones).
		if err := s.f.Sync(); err != nil {
			return 0, fmt.Errorf("sync spool segment: %w", err)
		}
		s.f.Close()
		last++
		f, err := os.OpenFile(segName(s.dir, last), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return 0, fmt.Errorf("open spool segment: %w", err)
		}
		if err := syncDir(s.dir); err != nil {
			f.Close()
			return 0, err
		}
		s.f = f
		s.segs = append(s.segs, last)
		s.sizes[last] = 0
	}
	buf := make([]byte, 0, total)
	for i, e := range es {
		start := len(buf)
		buf = binary.BigEndian.AppendUint32(buf, uint32(8+len(bodies[i])))
		buf = append(buf, 0, 0, 0, 0)
		buf = binary.BigEndian.AppendUint64(buf, e.Seq)
		buf = append(buf, bodies[i]...)
		binary.BigEndian.PutUint32(buf[start+4:], crc32.Checksum(buf[start+frameHeader:], castagnoli))
	}
	if _, err := s.f.Write(buf); err != nil {
		// A partial write leaves a torn frame; cut it so the next write
		// starts clean.
		s.f.Truncate(s.sizes[last])
		return 0, fmt.Errorf("write spool: %w", err)
	}
	s.sizes[last] += int64(len(buf))
	for i, e := range es {
		s.jobs[e.JobID] += frameSize(bodies[i])
	}
	s.gen++
	select {
	case s.notify <- struct{}{}:
	default:
	}
	return s.gen, nil
}

// sync returns once every write up to gen is on disk. Concurrent callers
// share one fsync.
func (s *spool) sync(gen uint64) error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if s.synced >= gen {
		return nil
	}
	s.mu.Lock()
	f, upTo := s.f, s.gen
	s.mu.Unlock()
	// A segment switched since is synced already (append syncs before
	// switching), so the current file is the only one to sync.
	if err := f.Sync(); err != nil && !errors.Is(err, os.ErrClosed) {
		// ErrClosed: append switched segments meanwhile, syncing this one.
		return fmt.Errorf("sync spool: %w", err)
	}
	s.synced = upTo
	return nil
}

// spooled is a record read back from the spool.
type spooled struct {
	Entry
	size int
}

// position is the cursor: the first frame not yet in Loki.
func (s *spool) position() spoolPos {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cursor
}

// read returns up to maxRecords records (about maxBytes) from pos (at or
// after the cursor) on, without consuming them, and the position after
// them. Only the forwarder reads, ahead of the cursor while a push is in
// flight.
func (s *spool) read(pos spoolPos, maxRecords, maxBytes int) ([]spooled, spoolPos, error) {
	s.mu.Lock()
	segs := slices.Clone(s.segs)
	sizes := make(map[uint64]int64, len(segs))
	for _, n := range segs {
		sizes[n] = s.sizes[n]
	}
	s.mu.Unlock()
	var out []spooled
	var bytes int
	var buf []byte
	for len(out) < maxRecords && bytes < maxBytes {
		if pos.off >= sizes[pos.seg] {
			i := slices.Index(segs, pos.seg)
			if i < 0 || i == len(segs)-1 {
				break
			}
			pos = spoolPos{seg: segs[i+1]}
			continue
		}
		if err := s.seekReader(pos); err != nil {
			return nil, pos, err
		}
		p, err := readFrame(s.rdBuf, &buf)
		if err != nil {
			s.closeReader()
			return nil, pos, fmt.Errorf("read spool at %d/%d: %w", pos.seg, pos.off, err)
		}
		var e spooled
		e.Seq = binary.BigEndian.Uint64(p)
		if err := json.Unmarshal(p[8:], &e.Record); err != nil {
			return nil, pos, fmt.Errorf("decode spooled record: %w", err)
		}
		e.size = frameHeader + len(p)
		pos.off += int64(e.size)
		s.rdOff = pos.off
		bytes += e.size
		out = append(out, e)
	}
	return out, pos, nil
}

func (s *spool) seekReader(pos spoolPos) error {
	if s.rd != nil && s.rdSeg == pos.seg && s.rdOff == pos.off {
		return nil
	}
	s.closeReader()
	f, err := os.Open(segName(s.dir, pos.seg))
	if err != nil {
		return fmt.Errorf("open spool segment: %w", err)
	}
	if _, err := f.Seek(pos.off, io.SeekStart); err != nil {
		f.Close()
		return fmt.Errorf("seek spool segment: %w", err)
	}
	s.rd, s.rdSeg, s.rdOff, s.rdBuf = f, pos.seg, pos.off, bufio.NewReaderSize(f, 1<<16)
	return nil
}

func (s *spool) closeReader() {
	if s.rd != nil {
		s.rd.Close()
		s.rd, s.rdBuf = nil, nil
	}
}

// commit records that everything before pos is in Loki.
func (s *spool) commit(pos spoolPos) error {
	s.mu.Lock()
	s.cursor = pos
	var drop []uint64
	for len(s.segs) > 1 && s.segs[0] < pos.seg {
		drop = append(drop, s.segs[0])
		delete(s.sizes, s.segs[0])
		s.segs = s.segs[1:]
	}
	s.mu.Unlock()
	tmp := filepath.Join(s.dir, "cursor.tmp")
	if err := os.WriteFile(tmp, fmt.Appendf(nil, "%d %d\n", pos.seg, pos.off), 0o600); err != nil {
		return fmt.Errorf("write spool cursor: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, "cursor")); err != nil {
		return fmt.Errorf("write spool cursor: %w", err)
	}
	for _, n := range drop {
		os.Remove(segName(s.dir, n))
	}
	return nil
}

func (s *spool) close() error {
	s.closeReader()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Sync()
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	s.f = nil
	return err
}
