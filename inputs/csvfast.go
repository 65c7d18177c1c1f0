package inputs

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

// fastRows counts the rows in b's complete lines for as long as they are
// plain: fields split by delim, quoted fields that open at a field's
// start, close before a delimiter or the line's end and stay on one line,
// cols fields a row. It returns the rows, the bytes it consumed (whole
// lines) and the lines they held, and stops at the first line that is
// anything else, for nextRecord to read and, if it is wrong, explain.
//
// It looks at 64 bytes at a time as bitmasks, one bit a byte, of quotes,
// delimiters, newlines and carriage returns (built eight bytes at a time
// with SWAR arithmetic), as simdjson does: a prefix XOR of the quote mask
// marks the bytes inside quotes, and each row's fields are a popcount of
// the delimiters outside them.
func fastRows(b []byte, delim byte, cols int) (rows int64, consumed, lines int) {
	// Every check below looks only at the lines it settles, so a call
	// that stops at the first line costs that line, not the buffer.
	b = b[:bytes.LastIndexByte(b, '\n')+1]
	delims := uint64(delim) * ones
	pendingHigh := false // the line so far has bytes above 0x7f: check its UTF-8 at its end
	var inside uint64        // all ones while a quoted field runs on into the next block
	fieldStart := uint64(1)  // bit 0: the block's first byte starts a field
	closedLast := uint64(0)  // bit 0: the previous block ended with a closing quote
	lineStart, fields := 0, 0
	for i := 0; i < len(b); i += 64 {
		q, d, n, r, h := blockMasks(b[i:min(i+64, len(b))], delims)
		x := q // prefix XOR: the bits from each opening quote to its closing one
		x ^= x << 1
		x ^= x << 2
		x ^= x << 4
		x ^= x << 8
		x ^= x << 16
		x ^= x << 32
		in := x ^ inside
		opens, closes := q&in, q&^in
		starts := (d|n)<<1 | fieldStart
		escaped := closes<<1 | closedLast // the second quote of ""
		follow := d | n | q | r&(n>>1)    // what may come after a closing quote
		bad := n & in                      // a quoted field running over lines
		bad |= opens &^ (starts | escaped) // a quote inside an unquoted field
		bad |= closes &^ (follow >> 1) &^ (1 << 63)
		if closedLast != 0 && follow&1 == 0 { // text after the previous block's closing quote
			bad |= 1
		}
		before := ^uint64(0)
		if bad != 0 {
			before = uint64(1)<<bits.TrailingZeros64(bad) - 1
		}
		outside := d &^ in
		for nl := n & before; nl != 0; nl &= nl - 1 {
			k := bits.TrailingZeros64(nl)
			upTo := uint64(1)<<(k+1) - 1 // k = 63 wraps to all ones, as wanted
			fields += bits.OnesCount64(outside & upTo)
			outside &^= upTo
			p := i + k
			if (pendingHigh || h&upTo != 0) && !utf8.Valid(b[lineStart:p]) {
				return rows, lineStart, lines
			}
			h &^= upTo
			pendingHigh = false
			length := p - lineStart
			if length > 0 && b[p-1] == '\r' {
				length--
			}
			if length > 0 { // not a blank line
				if fields+1 != cols {
					return rows, lineStart, lines
				}
				rows++
			}
			lines++
			lineStart, fields = p+1, 0
		}
		if bad != 0 {
			return rows, lineStart, lines
		}
		fields += bits.OnesCount64(outside)
		pendingHigh = pendingHigh || h != 0
		inside = -(in >> 63) // all ones when the block ended inside quotes
		fieldStart = (d | n) >> 63
		closedLast = closes >> 63
	}
	return rows, len(b), lines
}

const (
	ones   = 0x0101010101010101
	low7   = 0x7f7f7f7f7f7f7f7f
	gather = 0x0102040810204080 // moves bit 8j to bit 56+j
)

// blockMasks returns, for up to 64 bytes, a bit a byte for quotes,
// delimiters (delims is the delimiter in every byte), newlines, carriage
// returns and bytes above 0x7f.
func blockMasks(b []byte, delims uint64) (q, d, n, r, h uint64) {
	var pad [64]byte
	if len(b) < 64 {
		copy(pad[:], b) // zero bytes match none of the four
		b = pad[:]
	}
	for j := 0; j < 8; j++ {
		w := binary.LittleEndian.Uint64(b[8*j:])
		shift := uint(8 * j)
		q |= match(w, '"'*ones) << shift
		d |= match(w, delims) << shift
		n |= match(w, '\n'*ones) << shift
		r |= match(w, '\r'*ones) << shift
		if hi := w & (ones << 7); hi != 0 { // rare in most files
			h |= (hi >> 7) * gather >> 56 << shift
		}
	}
	return
}

// match returns a byte with bit j set where byte j of w equals that of c
// (exactly: no false hits from borrows).
func match(w, c uint64) uint64 {
	t := w ^ c
	z := ^((t&low7 + low7) | t | low7) // 0x80 in each zero byte
	return (z >> 7) * gather >> 56
}
